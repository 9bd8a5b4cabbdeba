package registry

import (
	"container/list"
	"sync"
)

// refCacheSize bounds the referenced schemas a Client keeps: far more
// than the types a topic's schemas share, and a few MiB at most.
const refCacheSize = 1024

// refKey names a subject's version, which the registry never changes:
// what a reference points at.
type refKey struct {
	subject string
	version int
}

// refCache keeps the most recently used referenced schemas, resolved,
// safe for concurrent use.
type refCache struct {
	mu  sync.Mutex
	max int
	ll  *list.List // of *refEntry, the most recently used first
	m   map[refKey]*list.Element
}

type refEntry struct {
	key refKey
	s   *Schema
}

func newRefCache(max int) *refCache {
	return &refCache{max: max, ll: list.New(), m: make(map[refKey]*list.Element)}
}

func (c *refCache) get(k refKey) (*Schema, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*refEntry).s, true
}

func (c *refCache) add(k refKey, s *Schema) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		e.Value.(*refEntry).s = s
		c.ll.MoveToFront(e)
		return
	}
	c.m[k] = c.ll.PushFront(&refEntry{key: k, s: s})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.m, last.Value.(*refEntry).key)
	}
}

func (c *refCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}
