package api

import (
	"encoding/json"
	"net/http"

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
