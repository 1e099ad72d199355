package verdict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// constants returns the package's exported string constants by name prefix,
// read from the source so a constant added without its list entry is caught.
func constants(t *testing.T) map[string]map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, f := range pkgs["verdict"].Files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, _ := strconv.Unquote(lit.Value)
					for _, p := range []string{"Code", "Verdict", "Action", "Outcome", "ExitKind", "Reason", "Status"} {
						if strings.HasPrefix(n.Name, p) && len(n.Name) > len(p) {
							if out[p] == nil {
								out[p] = map[string]string{}
							}
							out[p][n.Name] = v
						}
					}
				}
			}
		}
	}
	return out
}

func TestEveryConstantIsListed(t *testing.T) {
	c := constants(t)
	lists := map[string][]string{
		"Code": Codes, "Verdict": Verdicts, "Action": Actions, "Outcome": Outcomes,
		"ExitKind": ExitKinds, "Reason": Reasons,
		"Status": {StatusInvalid, StatusRefused, StatusError},
	}
	for prefix, list := range lists {
		if len(c[prefix]) != len(list) {
			t.Errorf("%s: %d constants, %d listed", prefix, len(c[prefix]), len(list))
		}
		seen := map[string]bool{}
		for name, v := range c[prefix] {
			if !contains(list, v) {
				t.Errorf("%s = %q is not in its list", name, v)
			}
			if seen[v] {
				t.Errorf("%s: value %q used twice", name, v)
			}
			seen[v] = true
		}
	}
	if len(c["Code"]) != len(classes) {
		t.Errorf("%d codes, %d rows in the table", len(c["Code"]), len(classes))
	}
	for name, v := range c["Code"] {
		if !Known(v) {
			t.Errorf("%s (%q) has no row in Classify's table", name, v)
		}
	}
}

func TestClassifyTable(t *testing.T) {
	httpByStatus := map[string][]int{
		StatusInvalid: {400, 405, 413}, StatusRefused: {409}, StatusError: {403, 404, 409, 422, 500, 503, 504},
	}
	reasons := map[string]Code{}
	for _, c := range Codes {
		cl := Classify(c)
		if !contains([]string{StatusInvalid, StatusRefused, StatusError}, cl.Status) {
			t.Errorf("%s: status %q", c, cl.Status)
		}
		if !containsInt(httpByStatus[cl.Status], cl.HTTP) {
			t.Errorf("%s: HTTP %d with status %s", c, cl.HTTP, cl.Status)
		}
		if !containsInt([]int{1, 2, 3, 4, 69, 75, 77}, cl.Exit) {
			t.Errorf("%s: exit %d not in docs/contract.md", c, cl.Exit)
		}
		if cl.Reason == "" || strings.ToLower(cl.Reason) != cl.Reason || strings.ContainsAny(cl.Reason, " -") {
			t.Errorf("%s: reason %q is not snake_case", c, cl.Reason)
		}
		if other, dup := reasons[cl.Reason]; dup {
			t.Errorf("%s and %s share reason %q", c, other, cl.Reason)
		}
		reasons[cl.Reason] = c
		if contains(Reasons, cl.Reason) {
			t.Errorf("%s: reason %q collides with a non-error reason", c, cl.Reason)
		}
		if strings.HasPrefix(c, "identity_") != (cl.Status == StatusRefused) {
			t.Errorf("%s: fence refusals and only they are refused", c)
		}
	}
	// docs/contract.md's fixed points.
	fixed := []struct {
		code       Code
		http, exit int
		status     string
	}{
		{CodeInvalidRequest, http.StatusBadRequest, 2, StatusInvalid},
		{CodeBodyTooLarge, http.StatusRequestEntityTooLarge, 2, StatusInvalid},
		{CodeMethodNotAllowed, http.StatusMethodNotAllowed, 2, StatusInvalid},
		{CodePermissionDenied, http.StatusForbidden, 77, StatusError},
		{CodeNotFound, http.StatusNotFound, 4, StatusError},
		{CodeIdentityReservedLive, http.StatusConflict, 3, StatusRefused},
		{CodeIdentityFenceContended, http.StatusConflict, 75, StatusRefused},
		{CodeTmuxUnavailable, http.StatusServiceUnavailable, 1, StatusError},
		{CodeFenceUnavailable, http.StatusServiceUnavailable, 1, StatusError},
		{CodeTimeout, http.StatusGatewayTimeout, 1, StatusError},
		{CodeInternal, http.StatusInternalServerError, 1, StatusError},
		{CodeDaemonUnreachable, http.StatusServiceUnavailable, 69, StatusError},
		{CodeBusy, http.StatusServiceUnavailable, 75, StatusError},
	}
	for _, f := range fixed {
		if cl := Classify(f.code); cl.HTTP != f.http || cl.Exit != f.exit || cl.Status != f.status {
			t.Errorf("%s: %+v", f.code, cl)
		}
	}
	if Classify("no_such_code") != Classify(CodeInternal) || Known("no_such_code") {
		t.Error("unknown code is not internal")
	}
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func TestErrorf(t *testing.T) {
	cause := os.ErrPermission
	e := Errorf(CodeFenceUnavailable, map[string]any{"path": "/x"}, "open fence %s: %w", "/x", cause)
	if e.Code != CodeFenceUnavailable || e.Message != "open fence /x: permission denied" || e.Err != cause {
		t.Fatalf("%+v", e)
	}
	if e.Error() != "fence_unavailable: open fence /x: permission denied" {
		t.Fatal(e.Error())
	}
	wrapped := fmt.Errorf("create: %w", e)
	if !errors.Is(wrapped, os.ErrPermission) || CodeOf(wrapped) != CodeFenceUnavailable {
		t.Fatal("cause or code lost through wrapping")
	}
	if !errors.Is(wrapped, &Error{Code: CodeFenceUnavailable}) || errors.Is(wrapped, &Error{Code: CodeTimeout}) {
		t.Fatal("errors.Is by code")
	}
	if !HasCode(wrapped, CodeFenceUnavailable) || AsError(wrapped) != e {
		t.Fatal("HasCode/AsError")
	}
	if Errorf(CodeInternal, nil, "plain").Err != nil {
		t.Fatal("no %w, no cause")
	}
}

func TestCodeOf(t *testing.T) {
	if CodeOf(nil) != "" || AsError(nil) != nil {
		t.Fatal("nil")
	}
	if CodeOf(errors.New("x")) != CodeInternal {
		t.Fatal("plain error is internal")
	}
	if CodeOf(fmt.Errorf("wait: %w", context.DeadlineExceeded)) != CodeTimeout {
		t.Fatal("deadline is timeout")
	}
	if a := AsError(errors.New("boom")); a.Code != CodeInternal || a.Message != "boom" {
		t.Fatalf("%+v", a)
	}
}

func TestErrorJSON(t *testing.T) {
	e := Errorf(CodeInvalidRequest, map[string]any{"field": "state_dir"}, "state_dir must be absolute")
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":"invalid_request","message":"state_dir must be absolute","details":{"field":"state_dir"}}`
	if string(b) != want {
		t.Fatalf("%s", b)
	}
	b, _ = json.Marshal(&Error{Code: CodeInternal})
	if string(b) != `{"code":"internal","message":"","details":{}}` {
		t.Fatalf("%s", b)
	}
	var back Error
	if err := json.Unmarshal([]byte(want), &back); err != nil || back.Code != CodeInvalidRequest || back.Details["field"] != "state_dir" {
		t.Fatalf("%+v %v", back, err)
	}
}
