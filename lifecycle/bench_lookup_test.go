package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"
)

// BenchmarkLookupList measures, in process (no HTTP), Show by name and List plus
// its JSON encoding with n live sessions on a real tmux server and fence, and
// the encoded forms the API serves (AppendShowJSON, AppendListJSON).
// api/backend's BenchmarkReads measures the same through HTTP against tmux forks.
//
//	go test -run '^$' -bench LookupList -benchtime 200x ./lifecycle/
func BenchmarkLookupList(b *testing.B) {
	const n = 300
	e := startEnvB(b)
	var names []string
	for i := 0; i < n; i++ {
		id, spec := e.identity(fmt.Sprintf("ll%d", i))
		res, err := e.m.Create(context.Background(), CreateRequest{Identity: id, Spec: spec})
		if err != nil {
			b.Fatal(err)
		}
		names = append(names, res.Session.Name)
	}
	for {
		if l, err := e.m.List(context.Background()); err == nil && len(l.Sessions) == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Run("show", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := e.m.Show(context.Background(), Ref{Name: names[i%n]}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("show-json", func(b *testing.B) {
		var buf []byte
		for i := 0; i < b.N; i++ {
			var err error
			if buf, err = e.m.AppendShowJSON(context.Background(), buf[:0], Ref{Name: names[i%n]}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list-json", func(b *testing.B) {
		var buf []byte
		for i := 0; i < b.N; i++ {
			var err error
			if buf, err = e.m.AppendListJSON(context.Background(), buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("list+json", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			l, err := e.m.List(context.Background())
			if err != nil || len(l.Sessions) != n {
				b.Fatal(err)
			}
			if err := json.NewEncoder(io.Discard).Encode(l); err != nil {
				b.Fatal(err)
			}
		}
	})
}
