package postgres

import (
	"testing"

	"github.com/skc-supervisor/skc-supervisor/fence"
	"github.com/skc-supervisor/skc-supervisor/fence/fencetest"
	"github.com/skc-supervisor/skc-supervisor/internal/pgtest"
)

// harness makes a fresh database per test on the package's PostgreSQL
// server; each handle is its own pool (one process of the suite's world).
var harness = fencetest.Harness{
	New: func(t *testing.T) fencetest.Opener {
		url := pgtest.DB(t)
		return func(opt fence.Options) (fence.Fence, error) {
			return Open(url, opt, Config{})
		}
	},
}

// TestSuite: the PostgreSQL engine passes the fence's shared behaviour suite.
func TestSuite(t *testing.T) { fencetest.Run(t, harness) }
