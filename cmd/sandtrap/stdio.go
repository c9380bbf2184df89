package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"sync"
	"time"
)

// drainingStdio is the MCP server's stdin and stdout: at end of input it answers
// what it was asked before it stops (`echo REQUEST | sandtrap mcp` gets its answer;
// the SDK ends the session at EOF and would drop a reply still being made). It
// counts the requests read and the replies written, line by line (stdio frames
// are one JSON message a line), and reports EOF once every request has its reply,
// or after drainLimit.
type drainingStdio struct {
	in      *bufio.Reader
	out     io.Writer
	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]bool // ids of requests without a reply
	buf     []byte          // the rest of the line being read
	outBuf  []byte
}

// drainLimit bounds the wait at EOF: the longest call (the policy's timeout) and
// some.
var drainLimit = 10 * time.Minute

func newDrainingStdio() *drainingStdio {
	d := &drainingStdio{in: bufio.NewReaderSize(os.Stdin, 64<<10), out: os.Stdout, pending: map[string]bool{}}
	d.cond = sync.NewCond(&d.mu)
	return d
}

type frame struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

func (d *drainingStdio) Read(p []byte) (int, error) {
	if len(d.buf) == 0 {
		line, err := d.in.ReadBytes('\n')
		if len(line) > 0 {
			var f frame
			if json.Unmarshal(bytes.TrimSpace(line), &f) == nil && f.Method != "" && len(f.ID) > 0 && string(f.ID) != "null" {
				d.mu.Lock()
				d.pending[string(f.ID)] = true
				d.mu.Unlock()
			}
			d.buf = line
		} else if err != nil {
			d.waitDrained()
			return 0, err
		}
	}
	n := copy(p, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}

func (d *drainingStdio) waitDrained() {
	deadline := time.Now().Add(drainLimit)
	go func() { // wake the wait at the deadline
		time.Sleep(drainLimit)
		d.cond.Broadcast()
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.pending) > 0 && time.Now().Before(deadline) {
		d.cond.Wait()
	}
}

func (d *drainingStdio) Write(p []byte) (int, error) {
	d.mu.Lock()
	d.outBuf = append(d.outBuf, p...)
	for {
		i := bytes.IndexByte(d.outBuf, '\n')
		if i < 0 {
			break
		}
		var f frame
		if json.Unmarshal(bytes.TrimSpace(d.outBuf[:i]), &f) == nil && f.Method == "" && len(f.ID) > 0 {
			delete(d.pending, string(f.ID))
		}
		d.outBuf = d.outBuf[i+1:]
	}
	d.mu.Unlock()
	n, err := d.out.Write(p)
	d.cond.Broadcast()
	return n, err
}

func (d *drainingStdio) Close() error { return nil }
