package events

import (
	"testing"

	"github.com/schedloop/schedloop/internal/harness"
	"github.com/schedloop/schedloop/internal/store"
	"github.com/schedloop/schedloop/internal/store/storetest"
)

// NewTestWatcher makes a watcher over c storing into a fresh database,
// dropped when the test ends; opts' Client and Store are filled in, the
// rest (Dynamic among them: nil watches no gangs) is the test's. It is
// exported for the events_test package's tests too; it does not run the
// watcher.
func NewTestWatcher(t *testing.T, c *harness.Cluster, opts WatchOptions) (*Watcher, *store.Store) {
	t.Helper()
	s := storetest.New(t)
	opts.Client, opts.Store = c.Client, s
	w, err := NewWatcher(opts)
	if err != nil {
		t.Fatal(err)
	}
	return w, s
}
