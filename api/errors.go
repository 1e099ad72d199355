package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/skc-supervisor/skc-supervisor/verdict"
)

// ErrorBody is the one error shape of the API and of the CLI's --json output:
// {"status": "invalid"|"refused"|"error", "error": {"code","message","details"}}.
type ErrorBody struct {
	Status string         `json:"status"`
	Error  *verdict.Error `json:"error"`
}

// NewErrorBody classifies err through verdict.Classify (the one table).
func NewErrorBody(err error) ErrorBody {
	e := verdict.AsError(err)
	if e.Message == "" {
		e = &verdict.Error{Code: e.Code, Message: e.Error(), Details: e.Details, Err: e.Err}
	}
	return ErrorBody{Status: verdict.Classify(e.Code).Status, Error: e}
}

// writeError writes err in the one error shape with the status of its code.
func writeError(w http.ResponseWriter, err error) {
	body := NewErrorBody(err)
	writeJSON(w, verdict.Classify(body.Error.Code).HTTP, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(NewErrorBody(verdict.Errorf(verdict.CodeInternal, nil, "encode response: %v", err)))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// bodies are response buffers for writeEncoded: a list of 1,000 sessions is
// about 330 KB, and allocating that per request was garbage for every list.
var bodies = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers kept for reuse.
const maxPooledBody = 4 << 20

// writeEncoded answers 200 with the JSON document fill appends (plus the
// newline writeJSON ends with), or the error fill returns. Content-Length is
// set, so the body is not chunked.
func writeEncoded(w http.ResponseWriter, fill func(dst []byte) ([]byte, error)) {
	bp := bodies.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBody {
			bodies.Put(bp)
		}
	}()
	b, err := fill((*bp)[:0])
	*bp = b
	if err != nil {
		writeError(w, err)
		return
	}
	b = append(b, '\n')
	*bp = b
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
