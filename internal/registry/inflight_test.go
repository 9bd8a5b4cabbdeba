package registry

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/offsetkeeper/offsetkeeper/integration/harness"
)

// waiters is how many callers wait for the fetch of id, 0 if none runs.
func (c *Client) waiters(id int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl := c.inflight[id]; cl != nil {
		return cl.waiters
	}
	return 0
}

// TestConcurrentCallsShareOneFetch: callers of one id while the registry
// does not answer all get the schema of one request when it does.
func TestConcurrentCallsShareOneFetch(t *testing.T) {
	reg := harness.StartSchemaRegistry(t)
	id := reg.RegisterJSON(t, "s", `{"type":"string"}`)
	other := reg.RegisterJSON(t, "t", `{"type":"integer"}`)
	c, err := New(Config{URL: reg.URL, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := harness.Context(t, time.Minute)

	const callers = 8
	reg.Pause()
	var wg sync.WaitGroup
	errs := make(chan error, callers+1)
	call := func(id int) {
		defer wg.Done()
		s, err := c.SchemaByID(ctx, id)
		if err == nil && s.ID != id {
			err = fmt.Errorf("asked for %d, got %d", id, s.ID)
		}
		errs <- err
	}
	wg.Add(callers + 1)
	for range callers {
		go call(id)
	}
	go call(other) // another id is a fetch of its own
	harness.Await(t, 10*time.Second, "every caller waiting", func() bool {
		return c.waiters(id) == callers && c.waiters(other) == 1
	})
	reg.Resume()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if st := c.Stats(); st.Requests != 2 {
		t.Errorf("%d requests, want 2: one for each id", st.Requests)
	}
	if n := c.waiters(id); n != 0 {
		t.Errorf("a fetch of %d is left, with %d waiters", id, n)
	}
}

func TestRefCacheBounded(t *testing.T) {
	c := newRefCache(3)
	key := func(v int) refKey { return refKey{subject: "s", version: v} }
	for v := 1; v <= 3; v++ {
		c.add(key(v), &Schema{Text: fmt.Sprint(v)})
	}
	c.get(key(1)) // now the most recently used: 2 goes first
	c.add(key(4), &Schema{Text: "4"})
	for _, tc := range []struct {
		v    int
		kept bool
	}{{1, true}, {2, false}, {3, true}, {4, true}} {
		s, ok := c.get(key(tc.v))
		if ok != tc.kept || ok && s.Text != fmt.Sprint(tc.v) {
			t.Errorf("version %d: %v, %v; want kept %v", tc.v, s, ok, tc.kept)
		}
	}
	if n := c.len(); n != 3 {
		t.Errorf("%d entries, want 3", n)
	}
}
