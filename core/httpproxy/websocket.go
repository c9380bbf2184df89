package httpproxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Websockets: an HTTP/1.1 request with "Connection: Upgrade" and "Upgrade:
// websocket" is checked by the rules as any request (its method, host and path:
// the opening request), sent on with the upgrade, and when the upstream answers
// 101 Switching Protocols the proxy writes that answer to the sandbox and copies
// bytes both ways until either side ends: the frames inside are not checked.
// Any other upgrade (h2c, …) is dropped from the request: the server answers it
// as plain HTTP/1.1.

// websocket reports whether req asks to be upgraded to a websocket.
func websocket(req *http.Request) bool {
	if !strings.EqualFold(strings.TrimSpace(req.Header.Get("Upgrade")), "websocket") {
		return false
	}
	for _, v := range req.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// switched writes the upstream's 101 to the sandbox and splices the upgraded
// connection (resp.Body, an io.ReadWriteCloser) with the sandbox's.
func (s *session) switched(resp *http.Response) {
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		writeStatus(s.c, http.StatusBadGateway, "sandtrap: the upstream's upgrade is not a connection\n")
		return
	}
	w := bufio.NewWriter(s.c)
	fmt.Fprintf(w, "HTTP/1.1 101 %s\r\n", http.StatusText(http.StatusSwitchingProtocols))
	resp.Header.Write(w)
	io.WriteString(w, "\r\n")
	s.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if w.Flush() != nil {
		return
	}
	s.c.SetDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		io.Copy(s.c, rwc)
		if cw, ok := s.c.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
		close(done)
	}()
	io.Copy(rwc, s.br) // what the sandbox sent after its request, then the rest
	rwc.Close()
	<-done
}
