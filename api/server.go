package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// MetricsWriter writes the Prometheus text exposition (metrics.Registry).
type MetricsWriter interface {
	WriteText(w io.Writer) error
}

// Config configures a Server.
type Config struct {
	Service Service
	// AllowUID is the only peer uid the API answers (the daemon's own uid;
	// `serve` passes os.Geteuid()). Every other peer gets 403
	// permission_denied. The zero value admits root only: it fails closed.
	AllowUID int
	Info     Info          // GET /v1/info
	Metrics  MetricsWriter // GET /metrics; nil answers an empty exposition
	Log      *zerolog.Logger
}

// Server is the HTTP API on api.sock.
type Server struct {
	cfg      Config
	log      zerolog.Logger
	http     *http.Server
	stopping chan struct{} // closed by Shutdown: ends --follow streams
	stopOnce sync.Once
}

// New returns a Server; Serve starts it on a listener from Listen.
func New(cfg Config) (*Server, error) {
	if cfg.Service == nil {
		return nil, errors.New("api: Config.Service is required")
	}
	s := &Server{cfg: cfg, log: zerolog.Nop(), stopping: make(chan struct{})}
	if cfg.Log != nil {
		s.log = cfg.Log.With().Str("component", "api").Logger()
	}
	s.http = &http.Server{
		Handler:           s.Handler(),
		ConnContext:       withPeerCred,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	return s, nil
}

// Handler is the API's handler with its guard (peer credentials, Origin, body
// limit) in front; requests must carry peer credentials in their context
// (ConnContext does that for real unix connections).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", s.handleCreate)
	mux.HandleFunc("GET /v1/sessions", s.handleList)
	mux.HandleFunc("GET /v1/sessions/{name}", s.handleShow)
	mux.HandleFunc("DELETE /v1/sessions/{name}", s.handleKill)
	mux.HandleFunc("GET /v1/sessions/{name}/screen", s.handleScreen)
	mux.HandleFunc("POST /v1/sessions/{name}/input", s.handleInput)
	mux.HandleFunc("GET /v1/sessions/{name}/output", s.handleOutput)
	mux.HandleFunc("GET /v1/sessions/{name}/wait", s.handleWait)
	mux.HandleFunc("GET /v1/identity/screen", s.handleScreen)
	mux.HandleFunc("POST /v1/identity/input", s.handleInput)
	mux.HandleFunc("GET /v1/identity/output", s.handleOutput)
	mux.HandleFunc("GET /v1/identity/wait", s.handleWait)
	mux.HandleFunc("GET /v1/identity", s.handleShow)
	mux.HandleFunc("DELETE /v1/identity", s.handleKill)
	mux.HandleFunc("POST /v1/sessions/{name}/restart", s.handleRestart)
	mux.HandleFunc("POST /v1/identity/restart", s.handleRestart)
	mux.HandleFunc("GET /v1/verdicts", s.handleVerdicts)
	mux.HandleFunc("GET /v1/fence", s.handleFence)
	mux.HandleFunc("POST /v1/fence/release", s.handleRelease)
	mux.HandleFunc("POST /v1/fence/forget", s.handleForget)
	mux.HandleFunc("GET /v1/ping", s.handlePing)
	mux.HandleFunc("GET /v1/info", s.handleInfo)
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { s.handleUnknown(mux, w, r) })
	return s.guard(mux)
}

// guard refuses, in this order: a peer whose uid is not ours (a process of
// another user that reached the socket), a request with an Origin header (a
// browser page talking to us through some proxy), and bodies over 1 MiB.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, ok := PeerFrom(r.Context())
		if !ok || int(cred.UID) != s.cfg.AllowUID {
			s.log.Warn().Bool("creds", ok).Uint32("peer_uid", cred.UID).Int32("peer_pid", cred.PID).
				Str("path", r.URL.Path).Msg("refused: peer uid is not the daemon's")
			writeError(w, verdict.Errorf(verdict.CodePermissionDenied,
				map[string]any{"peer_uid": cred.UID, "allowed_uid": s.cfg.AllowUID},
				"peer uid %d may not use this daemon (only uid %d may)", cred.UID, s.cfg.AllowUID))
			return
		}
		if _, has := r.Header["Origin"]; has {
			writeError(w, verdict.Errorf(verdict.CodePermissionDenied, map[string]any{"header": "Origin"},
				"requests with an Origin header are refused: the API is not for browsers"))
			return
		}
		if err := checkRequestLine(r); err != nil {
			writeError(w, err)
			return
		}
		if r.ContentLength > MaxBody {
			// Refused before routing, also by an endpoint that reads no
			// body (ping, DELETE): the limit is the API's, not a handler's.
			// Read up to the limit first, as a handler does: a client still
			// writing its body then reads the answer, not a broken pipe.
			_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, MaxBody))
			writeError(w, verdict.Errorf(verdict.CodeBodyTooLarge, map[string]any{"limit_bytes": MaxBody},
				"request body is larger than %d bytes", MaxBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		next.ServeHTTP(rec, r)
		s.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", rec.status).
			Int32("peer_pid", cred.PID).Dur("duration", time.Since(start)).Msg("request")
	})
}

// checkRequestLine refuses what the mux would answer outside the API's
// envelope or read ambiguously: a path that is not written clean (`//v1/ping`:
// the mux would redirect with an HTML page) is not_found, a query that does
// not parse or gives a parameter twice (`?session_id=a&session_id=b`: the
// first would silently win, also for DELETE) is invalid_request naming it.
func checkRequestLine(r *http.Request) error {
	if p := r.URL.Path; p != "/" && path.Clean(p) != p {
		return verdict.Errorf(verdict.CodeNotFound, map[string]any{"method": r.Method, "path": p},
			"no endpoint %s %s (paths are written clean, without // . or ..)", r.Method, p)
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalid("query", "does not parse: %v", err)
	}
	for k, vs := range q {
		if len(vs) > 1 {
			return invalid(k, "given %d times; give it once", len(vs))
		}
	}
	return nil
}

// statusWriter remembers the status for the request log; it passes Flush
// through, which --follow streams need.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the connection (write deadlines
// of streams at the daemon's stop).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Serve answers requests on ln until Shutdown; it returns nil after a
// Shutdown and the listener's error otherwise.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops accepting, ends --follow streams, and waits (within ctx)
// for in-flight requests — creates included — to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	return s.http.Shutdown(ctx)
}
