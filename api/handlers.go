package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	req, err := DecodeCreate(body)
	if err != nil {
		writeError(w, err)
		return
	}
	spec, err := Validate(req)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.cfg.Service.Create(r.Context(), spec)
	if err != nil {
		writeError(w, err)
		return
	}
	status := http.StatusOK
	if res.Status == StatusPublished {
		status = http.StatusCreated
	}
	writeJSON(w, status, res)
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) {
	fleet, err := queryFlag(r, "fleet")
	if err != nil {
		writeError(w, err)
		return
	}
	if fleet {
		res, err := s.cfg.Service.ListFleet(r.Context())
		writeList(w, res, err)
		return
	}
	if enc, ok := s.cfg.Service.(EncodedReads); ok {
		writeEncoded(w, func(dst []byte) ([]byte, error) { return enc.AppendListJSON(r.Context(), dst) })
		return
	}
	res, err := s.cfg.Service.List(r.Context())
	writeList(w, res, err)
}

// writeList answers a list: an empty one is [] on the wire, never null.
func writeList(w http.ResponseWriter, res ListResponse, err error) {
	if err != nil {
		writeError(w, err)
		return
	}
	if res.Sessions == nil {
		res.Sessions = []Session{}
	}
	writeJSON(w, http.StatusOK, res)
}

// refFrom reads the session reference: {name} from the path, or
// ?state_dir=&session_id= on /v1/identity.
func refFrom(r *http.Request) (Ref, error) {
	if name := r.PathValue("name"); name != "" {
		return ValidateRef(Ref{Name: name})
	}
	q := r.URL.Query()
	return ValidateRef(Ref{StateDir: q.Get("state_dir"), SessionID: q.Get("session_id")})
}

func (s *Server) handleShow(w http.ResponseWriter, r *http.Request) {
	ref, err := refFrom(r)
	if err != nil {
		writeError(w, err)
		return
	}
	if enc, ok := s.cfg.Service.(EncodedReads); ok {
		writeEncoded(w, func(dst []byte) ([]byte, error) { return enc.AppendShowJSON(r.Context(), dst, ref) })
		return
	}
	res, err := s.cfg.Service.Show(r.Context(), ref)
	if err != nil {
		writeError(w, err)
		return
	}
	if len(res.Reservation) == 0 {
		res.Reservation = []byte("null")
	}
	if res.Verdicts == nil {
		res.Verdicts = []verdict.Record{}
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) {
	ref, err := refFrom(r)
	if err != nil {
		writeError(w, err)
		return
	}
	res, err := s.cfg.Service.Kill(r.Context(), ref)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleRestart(w http.ResponseWriter, r *http.Request) {
	ref, err := refFrom(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// It takes no body; one given must be empty or {} — a body with fields
	// is a request this endpoint does not understand, refused before a
	// restart (which ends the running agent) is done.
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeObject(body, map[string]any{}); err != nil {
			writeError(w, err)
			return
		}
	}
	res, err := s.cfg.Service.Restart(r.Context(), ref)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (s *Server) handleFence(w http.ResponseWriter, r *http.Request) {
	res, err := s.cfg.Service.Fence(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if res.Reservations == nil {
		res.Reservations = make([]json.RawMessage, 0)
	}
	if res.Identities == nil {
		res.Identities = make([]json.RawMessage, 0)
	}
	writeJSON(w, http.StatusOK, res)
}

// handleRelease is POST /v1/fence/release {"reservation_id": "…"}.
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	var req ReleaseRequest
	if !readStrict(w, r, map[string]any{"reservation_id": &req.ReservationID}, `{"reservation_id": "…"}`) {
		return
	}
	if len(req.ReservationID) != 32 || strings.Trim(req.ReservationID, "0123456789abcdef") != "" {
		writeError(w, invalid("reservation_id", "a reservation id is 32 lowercase hex characters"))
		return
	}
	res, err := s.cfg.Service.Release(r.Context(), req.ReservationID)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// handleForget is POST /v1/fence/forget {"host": "…"}; the fence validates
// the name (invalid_request, details.field host).
func (s *Server) handleForget(w http.ResponseWriter, r *http.Request) {
	var req ForgetRequest
	if !readStrict(w, r, map[string]any{"host": &req.Host}, `{"host": "…"}`) {
		return
	}
	if req.Host == "" {
		writeError(w, invalid("host", "forget needs the name of the host that is gone"))
		return
	}
	res, err := s.cfg.Service.Forget(r.Context(), req.Host)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// readStrict reads a small JSON body into targets (decodeObject: the same
// strict rules as a create's body); on failure it has answered
// invalid_request naming the field, with the shape wanted in the message, and
// reports false.
func readStrict(w http.ResponseWriter, r *http.Request, targets map[string]any, want string) bool {
	body, ok := readBody(w, r)
	if !ok {
		return false
	}
	if !utf8.Valid(body) {
		writeError(w, invalid("body", "is not valid UTF-8; want %s", want))
		return false
	}
	if err := decodeObject(body, targets); err != nil {
		e := verdict.AsError(err)
		writeError(w, verdict.Errorf(e.Code, e.Details, "%s; want %s", e.Message, want))
		return false
	}
	return true
}

func (s *Server) handlePing(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func (s *Server) handleInfo(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Info)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if s.cfg.Metrics == nil {
		return
	}
	if err := s.cfg.Metrics.WriteText(w); err != nil {
		s.log.Warn().Err(err).Msg("writing /metrics failed")
	}
}

// handleUnknown answers what no route took: a path that exists with other
// methods is 405 method_not_allowed with an Allow header (a client that sent
// GET to …/input must learn it has the method wrong, not that the session is
// missing); any other path is 404.
func (s *Server) handleUnknown(mux *http.ServeMux, w http.ResponseWriter, r *http.Request) {
	if allowed := allowedMethods(mux, r); len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, verdict.Errorf(verdict.CodeMethodNotAllowed,
			map[string]any{"method": r.Method, "path": r.URL.Path, "allowed": allowed},
			"%s %s: this path takes %s", r.Method, r.URL.Path, strings.Join(allowed, ", ")))
		return
	}
	writeError(w, verdict.Errorf(verdict.CodeNotFound, map[string]any{"method": r.Method, "path": r.URL.Path},
		"no endpoint %s %s", r.Method, r.URL.Path))
}

// apiMethods are the methods any route of ours takes (HEAD rides on GET).
var apiMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete}

// allowedMethods lists the methods for which mux routes r's path to a real
// endpoint rather than the catch-all.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allowed []string
	for _, m := range apiMethods {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

func parseSince(r *http.Request) (since int64, follow bool, err error) {
	q := r.URL.Query()
	if v := q.Get("since"); v != "" {
		since, err = strconv.ParseInt(v, 10, 64)
		if err != nil || since < 0 {
			return 0, false, invalid("since", "must be a sequence number >= 0, got %q", v)
		}
	}
	follow, err = queryFlag(r, "follow")
	return since, follow, err
}

// queryFlag reads the boolean query parameter name: 1/true, 0/false or
// absent.
func queryFlag(r *http.Request, name string) (bool, error) {
	switch r.URL.Query().Get(name) {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, invalid(name, "must be 1 or 0")
}

// bodyTimeout bounds the read of one request body (at most MaxBody over a
// unix socket). The server has no ReadTimeout — it would end every output
// stream and wait after its time, since net/http cancels a request's
// context at any read error of its connection — so a client that sends its
// headers and part of a body would otherwise hold its handler forever.
var bodyTimeout = 30 * time.Second // a var only so a test can wait less

// readBody reads a request body (already capped by the server's MaxBytesReader):
// a body over the cap is 413 body_too_large, any other read error (a body not
// sent within bodyTimeout among them) invalid_request; false when the answer
// has been written.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	rc := http.NewResponseController(w)
	// Not supported (a recorder in tests): the read is then unbounded.
	bounded := rc.SetReadDeadline(time.Now().Add(bodyTimeout)) == nil
	body, err := io.ReadAll(r.Body)
	if err == nil && bounded {
		_ = rc.SetReadDeadline(time.Time{}) // the connection may serve another request
	}
	// After a failed read the deadline stays: net/http reads what is left of
	// a body before it answers, and must not wait for a client that stopped.
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.Header().Set("Connection", "close")
		writeError(w, invalid("body", "not sent within %s", bodyTimeout))
		return nil, false
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, verdict.Errorf(verdict.CodeBodyTooLarge, map[string]any{"limit_bytes": mbe.Limit},
				"request body is larger than %d bytes", mbe.Limit))
			return nil, false
		}
		writeError(w, invalid("body", "cannot read it: %v", err))
		return nil, false
	}
	return body, true
}
