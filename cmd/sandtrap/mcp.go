package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sandtrap/sandtrap/core/engine"
	"github.com/sandtrap/sandtrap/core/policy"
	_ "github.com/sandtrap/sandtrap/core/session" // the cooperative sandbox's ops (run_python)
	"github.com/spf13/cobra"
	"github.com/vmihailenco/msgpack/v5"
)

// The MCP server: tools that run an agent's shell commands and Python code in
// sandboxes whose policy is the server's (a profile and options, as for run). A
// tool call may narrow it through its _meta (fs_writable, net_allow, max_memory)
// and never widen it: the server's policy is the ceiling.

// mcpDefaults fill what the server's policy leaves unset: every tool call is
// bounded in time, memory and processes, so a call that loops or fork-bombs ends
// and the server goes on.
var mcpDefaults = map[string]any{"timeout": 30.0, "max_memory": "512M", "max_processes": int64(64)}

// mcpSystem is what a server without a profile grants for reading: the system's
// programs and libraries.
var mcpSystem = []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"}

func newMCPCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "mcp [options]",
		Short: "serve sandboxed run_shell and run_python tools over MCP (stdio or HTTP)",
		Long: `Serve the Model Context Protocol on stdin/stdout (the default), or over streamable
HTTP on a loopback address with --http 127.0.0.1:PORT (path /mcp; requests whose
Host is not a loopback name are refused, against DNS rebinding; with
SANDTRAP_MCP_TOKEN set, every request must carry "Authorization: Bearer TOKEN").
Tools:

  run_shell   {command, stdin?, timeout?}: /bin/sh -c COMMAND in the process
              sandbox of the server's policy
  run_python  {code, timeout?}: Python code in the cooperative sandbox at isolation
              "kernel" (a restricted interpreter in a worker under Landlock, seccomp
              and limits, no network, no subprocesses); its namespace persists from
              call to call

The server's policy is a profile (--profile, --profile-file) and the same options
as sandtrap run; without a profile it grants reading the system's directories
(/usr /bin /lib /etc…) and writing a workspace of its own (--workspace, default a
new directory under /tmp), which is also the working directory. Unset limits
default to timeout 30 s, max_memory 512M, max_processes 64.

A call may narrow the policy in its _meta ("sandtrap/fs_writable", or plain
"fs_writable"; "net_allow"; "max_memory"): writable paths inside the server's
writable ones (the others become read-only), network rules among the server's
(any, if the server allows "*"), less memory. A call that asks for more than the
server allows fails with the reason; nothing widens the server's policy.

Results: text content (exit code, stdout, stderr, the error), structured content
with the same fields, isError when the program did not succeed; denials are
included when the engine reports them.`,
		Args: cobra.NoArgs,
		RunE: mcpMain,
	}
	fs := c.Flags()
	addPolicyFlags(fs)
	addProfileFlags(fs)
	fs.String("http", "", "serve streamable HTTP on this loopback address (127.0.0.1:PORT, [::1]:PORT) instead of stdio")
	fs.String("workspace", "", "the writable working directory of a server without a profile (default: a new directory under /tmp)")
	_ = c.RegisterFlagCompletionFunc("profile", completeProfiles)
	return c
}

type mcpServer struct {
	policy    map[string]any // the ceiling
	workspace string
	coopMu    sync.Mutex
	coop      *engine.Sandbox // run_python's persistent cooperative sandbox
}

func mcpMain(c *cobra.Command, _ []string) error {
	fs := c.Flags()
	pol, prof, err := buildPolicy(fs)
	if err != nil {
		return err
	}
	srv := &mcpServer{}
	ws, _ := fs.GetString("workspace")
	if prof == nil || ws != "" {
		if ws == "" {
			if ws, err = os.MkdirTemp("", "sandtrap-mcp-"); err != nil {
				return fail(ExitSandbox, "workspace: %v", err)
			}
			defer os.RemoveAll(ws)
		} else if ws, err = filepath.Abs(ws); err != nil {
			return fail(ExitSandbox, "workspace: %v", err)
		}
		srv.workspace = ws
		if prof == nil {
			var sys []any
			for _, d := range mcpSystem {
				if _, err := os.Stat(d); err == nil {
					sys = append(sys, d)
				}
			}
			pol = merge(map[string]any{"fs_readable": sys}, pol)
		}
		pol = merge(map[string]any{"fs_writable": []any{ws}}, pol)
		if _, ok := pol["cwd"]; !ok {
			pol["cwd"] = ws
		}
	}
	for k, v := range mcpDefaults {
		if _, ok := pol[k]; !ok {
			pol[k] = v
		}
	}
	// the ceiling must be a valid sandbox before the first call
	sb, err := newSandbox(pol)
	if err != nil {
		return err
	}
	sb.Close()
	srv.policy = pol
	defer srv.close()

	server := mcp.NewServer(&mcp.Implementation{Name: "sandtrap", Version: version()}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "run_shell", Description: "Run a shell command (/bin/sh -c) in a sandbox: " +
		"only the server's granted paths and destinations are reachable; output, exit code and the error come back."}, srv.runShell)
	mcp.AddTool(server, &mcp.Tool{Name: "run_python", Description: "Run Python code in sandtrap's cooperative sandbox " +
		"(isolation \"kernel\": no network, no subprocesses, a filesystem root of its own); variables persist across calls."}, srv.runPython)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	addr, _ := fs.GetString("http")
	if addr == "" {
		io := newDrainingStdio()
		if err := server.Run(ctx, &mcp.IOTransport{Reader: io, Writer: io}); err != nil && !errors.Is(err, context.Canceled) {
			return fail(ExitSandbox, "mcp: %v", err)
		}
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fail(ExitSandbox, "--http %s: want a loopback address and a port, like 127.0.0.1:8765 (the server runs code for whoever reaches it)", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fail(ExitSandbox, "--http: %v", err)
	}
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	if tok := os.Getenv("SANDTRAP_MCP_TOKEN"); tok != "" {
		h = bearer(tok, h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	mux.Handle("/mcp/", h)
	hs := &http.Server{Handler: mux}
	fmt.Fprintf(os.Stderr, "sandtrap mcp: serving http://%s/mcp\n", ln.Addr())
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fail(ExitSandbox, "mcp: %v", err)
	}
	return nil
}

// bearer refuses requests without "Authorization: Bearer TOKEN" (SANDTRAP_MCP_TOKEN):
// a loopback port is open to every local user and process.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "sandtrap mcp: missing or wrong bearer token (SANDTRAP_MCP_TOKEN)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *mcpServer) close() {
	s.coopMu.Lock()
	defer s.coopMu.Unlock()
	if s.coop != nil {
		s.coop.Close()
	}
}

// ShellIn is run_shell's input.
type ShellIn struct {
	Command string  `json:"command" jsonschema:"the shell command, run by /bin/sh -c"`
	Stdin   string  `json:"stdin,omitempty" jsonschema:"text for the command's standard input"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds; at most the server's timeout"`
}

// PythonIn is run_python's input.
type PythonIn struct {
	Code    string  `json:"code" jsonschema:"Python source to execute"`
	Timeout float64 `json:"timeout,omitempty" jsonschema:"seconds; at most the server's timeout"`
}

// ToolOut is what both tools return as structured content.
type ToolOut struct {
	Success  bool           `json:"success"`
	ExitCode *int           `json:"exit_code"`
	Signal   *int           `json:"signal,omitempty"`
	Stdout   string         `json:"stdout"`
	Stderr   string         `json:"stderr"`
	Error    map[string]any `json:"error,omitempty"`
	TimedOut bool           `json:"timed_out,omitempty"`
	Denials  any            `json:"denials,omitempty"` // the run's denials, when the engine reports them (result.denials)
}

// narrow is the policy of one call: the server's, narrowed by the call's _meta.
func (s *mcpServer) narrow(meta mcp.Meta) (map[string]any, error) {
	pol := merge(map[string]any{}, s.policy)
	get := func(k string) (any, bool) {
		if v, ok := meta["sandtrap/"+k]; ok {
			return v, true
		}
		v, ok := meta[k]
		return v, ok
	}
	if v, ok := get("fs_writable"); ok {
		want, ok := strs(v)
		if !ok {
			return nil, errors.New("_meta fs_writable: want a list of absolute paths")
		}
		have, _ := strs(pol["fs_writable"])
		var keep []any
		for _, w := range want {
			w = filepath.Clean(w)
			inside := false
			for _, h := range have {
				inside = inside || (filepath.IsAbs(w) && policy.Within(w, filepath.Clean(h)))
			}
			if !inside {
				return nil, fmt.Errorf("_meta fs_writable %s: not within the server's writable paths %v (a call can only narrow the server's policy)", w, have)
			}
			keep = append(keep, w)
		}
		// what the server could write stays readable
		read, _ := pol["fs_readable"].([]any)
		for _, h := range have {
			read = append(read, h)
		}
		pol["fs_readable"], pol["fs_writable"] = read, keep
	}
	if v, ok := get("net_allow"); ok {
		want, ok := strs(v)
		if !ok {
			return nil, errors.New("_meta net_allow: want a list of rules (strings)")
		}
		have, _ := strs(pol["net_allow"])
		anyDest := false
		for _, h := range have {
			anyDest = anyDest || h == "*"
		}
		var keep []any
		for _, w := range want {
			found := anyDest
			for _, h := range have {
				found = found || h == w
			}
			if !found {
				return nil, fmt.Errorf("_meta net_allow %q: not among the server's rules %v (a call can only narrow the server's policy)", w, have)
			}
			keep = append(keep, w)
		}
		if len(keep) == 0 {
			delete(pol, "net_allow")
			delete(pol, "net_allow_udp")
		} else {
			pol["net_allow"] = keep
		}
	}
	if v, ok := get("max_memory"); ok {
		var want int64
		var err error
		switch x := v.(type) {
		case string:
			want, err = policy.ParseSize(x)
		case float64:
			want = int64(x)
		default:
			err = errors.New("want bytes or a size like \"256M\"")
		}
		if err != nil || want <= 0 {
			return nil, fmt.Errorf("_meta max_memory: %v", err)
		}
		ceiling, err := sizeOf(pol["max_memory"])
		if err != nil {
			return nil, err
		}
		if ceiling > 0 && want > ceiling {
			return nil, fmt.Errorf("_meta max_memory %d: more than the server's %d bytes (a call can only narrow the server's policy)", want, ceiling)
		}
		pol["max_memory"] = want
	}
	return pol, nil
}

func sizeOf(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		return policy.ParseSize(x)
	case int64:
		return x, nil
	case float64:
		return int64(x), nil
	}
	return 0, fmt.Errorf("max_memory: %v is not a size", v)
}

func strs(v any) ([]string, bool) {
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(l))
	for _, it := range l {
		s, ok := it.(string)
		if !ok {
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func (s *mcpServer) timeout(asked float64, pol map[string]any) float64 {
	ceiling, _ := pol["timeout"].(float64)
	if n, ok := pol["timeout"].(int64); ok {
		ceiling = float64(n)
	}
	if asked > 0 && (ceiling <= 0 || asked < ceiling) {
		return asked
	}
	return ceiling
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func (s *mcpServer) runShell(ctx context.Context, req *mcp.CallToolRequest, in ShellIn) (*mcp.CallToolResult, ToolOut, error) {
	if strings.TrimSpace(in.Command) == "" {
		return toolError("run_shell: command is empty"), ToolOut{}, nil
	}
	pol, err := s.narrow(req.Params.Meta)
	if err != nil {
		return toolError(err.Error()), ToolOut{}, nil
	}
	sb, err := newSandbox(pol)
	if err != nil {
		return toolError(err.Error()), ToolOut{}, nil
	}
	defer sb.Close()
	rr := &engine.RunRequest{Argv: []string{"/bin/sh", "-c", in.Command}, StdinFD: -1, StdoutFD: -1,
		Timeout: s.timeout(in.Timeout, pol), Tag: "mcp"}
	if in.Stdin != "" {
		rr.Stdin = []byte(in.Stdin)
	}
	stop := context.AfterFunc(ctx, func() { sb.Cancel("mcp", false) }) // the client cancelled
	defer stop()
	res := sb.Run(rr)
	m := resultJSON(res)
	out := ToolOut{Success: res.Success, ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, Denials: m["denials"]}
	out.Stdout, out.Stderr = text(m, "stdout"), text(m, "stderr")
	if res.Error != nil {
		out.Error = map[string]any{"kind": res.Error.Kind, "message": res.Error.Message}
	}
	return toolResult(out), out, nil
}

// denialLine is one of result.denials as a line: "connect tcp 10.0.0.1:80: EACCES
// (supervisor), 2 times".
func denialLine(d any) string {
	m, _ := d.(map[string]any)
	s := fmt.Sprint(m["syscall"])
	for _, k := range []string{"path", "address"} {
		if v, ok := m[k].(string); ok && v != "" {
			s += " " + v
		}
	}
	s += fmt.Sprintf(": %v (%v)", m["errno"], m["source"])
	if r, ok := m["reason"].(string); ok && r != "" {
		s += ": " + r
	}
	if n := fmt.Sprint(m["count"]); n != "1" && n != "0" && n != "<nil>" {
		s += ", " + n + " times"
	}
	return s
}

func text(m map[string]any, k string) string {
	if s, ok := m[k].(string); ok {
		return s
	}
	if b, ok := m[k+"_base64"].([]byte); ok {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return ""
}

func toolResult(out ToolOut) *mcp.CallToolResult {
	var b strings.Builder
	switch {
	case out.ExitCode != nil:
		fmt.Fprintf(&b, "exit code: %d\n", *out.ExitCode)
	case out.Signal != nil:
		fmt.Fprintf(&b, "killed by signal %d\n", *out.Signal)
	}
	if out.Error != nil {
		fmt.Fprintf(&b, "error: %v: %v\n", out.Error["kind"], out.Error["message"])
	}
	if out.Stdout != "" {
		b.WriteString("--- stdout ---\n" + out.Stdout)
		if !strings.HasSuffix(out.Stdout, "\n") {
			b.WriteString("\n")
		}
	}
	if out.Stderr != "" {
		b.WriteString("--- stderr ---\n" + out.Stderr)
		if !strings.HasSuffix(out.Stderr, "\n") {
			b.WriteString("\n")
		}
	}
	if l, _ := out.Denials.([]any); len(l) > 0 {
		b.WriteString("--- denials ---\n")
		for _, d := range l {
			b.WriteString(denialLine(d) + "\n")
		}
	}
	return &mcp.CallToolResult{IsError: !out.Success, Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}
}

// exec sends one op to a sandbox and decodes the response.
func exec(sb *engine.Sandbox, req map[string]any) (map[string]any, string, error) {
	b, err := msgpack.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	resp, kind := sb.Exec(b)
	m, err := engine.DecodeMap(resp, "response")
	return m, kind, err
}

func (s *mcpServer) python() string {
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "python3"
}

// openCoop starts a cooperative sandbox at isolation "kernel" with a call's limits.
func (s *mcpServer) openCoop(pol map[string]any, timeout float64) (*engine.Sandbox, error) {
	sb, err := engine.NewFromMap(map[string]any{})
	if err != nil {
		return nil, err
	}
	portable := map[string]any{"allow_network": false, "allow_subprocess": false}
	if timeout > 0 {
		portable["timeout"] = timeout
	}
	if mem, err := sizeOf(pol["max_memory"]); err == nil && mem > 0 {
		portable["memory_limit_bytes"] = mem // the wire's bytes (memory_limit is megabytes in the guest API)
	}
	req := map[string]any{"op": "coop_open", "level": "kernel", "interpreter": s.python(), "policy": portable}
	if s.workspace != "" {
		req["filesystem_root"] = s.workspace
	} else if w, _ := strs(pol["fs_writable"]); len(w) > 0 {
		req["filesystem_root"] = w[0]
	}
	m, kind, err := exec(sb, req)
	if err == nil && kind != "" {
		err = fmt.Errorf("%v", m["error"])
		if e, ok := m["error"].(map[string]any); ok {
			err = fmt.Errorf("%v", e["message"])
		}
	}
	if err != nil {
		sb.Close()
		return nil, err
	}
	return sb, nil
}

func (s *mcpServer) runPython(ctx context.Context, req *mcp.CallToolRequest, in PythonIn) (*mcp.CallToolResult, ToolOut, error) {
	pol, err := s.narrow(req.Params.Meta)
	if err != nil {
		return toolError(err.Error()), ToolOut{}, nil
	}
	timeout := s.timeout(in.Timeout, pol)
	// a call with limits of its own (or its own timeout) gets a sandbox of its own;
	// the others share the server's, whose namespace persists
	own := len(req.Params.Meta) > 0 || in.Timeout > 0
	var sb *engine.Sandbox
	if own {
		if sb, err = s.openCoop(pol, timeout); err != nil {
			return toolError("run_python: " + err.Error()), ToolOut{}, nil
		}
		defer sb.Close()
	} else {
		s.coopMu.Lock()
		if s.coop == nil {
			if s.coop, err = s.openCoop(pol, timeout); err != nil {
				s.coopMu.Unlock()
				return toolError("run_python: " + err.Error()), ToolOut{}, nil
			}
		}
		sb = s.coop
		s.coopMu.Unlock()
	}
	stop := context.AfterFunc(ctx, func() { sb.Cancel("mcp-python", false) })
	defer stop()
	m, kind, err := exec(sb, map[string]any{"op": "coop_exec", "code": in.Code, "tag": "mcp-python"})
	for err == nil && kind == "" && m["call"] != nil { // no host function is granted: refuse any call
		c, _ := m["call"].(map[string]any)
		m, kind, err = exec(sb, map[string]any{"op": "answer", "pending": m["pending"], "call": c["id"], "abort": true})
	}
	if err != nil {
		return toolError("run_python: " + err.Error()), ToolOut{}, nil
	}
	if kind != "" {
		msg := fmt.Sprint(m["error"])
		if e, ok := m["error"].(map[string]any); ok {
			msg = fmt.Sprint(e["message"])
		}
		return toolError("run_python: " + msg), ToolOut{}, nil
	}
	out := ToolOut{Stdout: str(m["stdout"]), Stderr: str(m["stderr"])}
	zero := 0
	if e, ok := m["error"].(map[string]any); ok && e != nil {
		out.Error = map[string]any{"kind": str(e["type"]), "message": str(e["message"])}
		if tb := str(m["traceback"]); tb != "" {
			out.Stderr += tb
		}
		one := 1
		out.ExitCode = &one
		out.TimedOut = e["type"] == "StTimeout"
	} else {
		out.Success, out.ExitCode = true, &zero
	}
	return toolResult(out), out, nil
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
