package kafka

// Decoded records in the budget: a reader that decodes its records (Avro,
// Protobuf, JSON Schema into JSON) keeps the JSON beside the fetched
// batches until its block is committed, so the budget counts it too.
//
// The JSON's size is known only once decoded, but the room for it must be
// kept before: a cursor whose share is filled with fetched batches leaves
// none for their JSON. So the cursor learns from its reader how many bytes
// of JSON a fetched byte became (ratio), fetches no more than its share
// can hold once decoded, and sets that much aside with every batch it
// queues (PolledBatch.Reserved). The reader settles the reservation with
// the true size once it has decoded (Decoded), and ends a block early only
// when the JSON outgrows what was set aside and the room left (Room),
// which happens while the ratio is still unknown or grows.

// ratioFloor is the least weight the old ratio keeps when a block decodes
// smaller: the reservation shrinks slowly and grows at once, so that a
// stream of mixed records is not cut short every other block.
const ratioFloor = 0.75

// probeShare is the part of its share a cursor whose reader decodes
// fetches first, before it knows what its JSON takes: the rest is room for
// that JSON.
const probeShare = 16

// ExpectDecoding says the reader decodes the records into JSON it holds
// until Free: until its first Decoded, the cursor fetches a small part of
// its share and waits, so that the JSON of the first block has room.
func (cur *Cursor) ExpectDecoding() {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	cur.decodes = true
}

// fetchLimit is how many bytes, as Kafka sends them, the cursor may ask
// for now: what is left of its share, less what they are expected to
// become once decompressed and decoded. The limit is on the wire's bytes,
// the budget on what they become. c.mu is held.
func (cur *Cursor) fetchLimit(share int64) int64 {
	room := float64(share - cur.held)
	if cur.decodes && cur.ratio == 0 {
		room = float64(share/probeShare - cur.held)
	}
	if cur.inflate > 1 {
		room /= cur.inflate
	}
	if cur.ratio > 0 {
		room /= 1 + cur.ratio
	}
	return max(int64(room), 1)
}

// roomForABatch reports whether a batch as large as the last one fits in
// what is left of the share once decompressed and decoded. A cursor that
// holds nothing is fetched whatever the size, so that it moves on; one that
// decodes and holds its block waits rather than take a batch past its
// share: Kafka returns a batch first in a response whole, whatever the
// limit, and a batch's JSON can be many times its size. c.mu is held.
func (cur *Cursor) roomForABatch(share int64) bool {
	switch {
	case cur.held == 0:
		return true
	case cur.decodes && cur.ratio == 0:
		return false // the first JSON's size is not known yet
	case cur.ratio <= 0 || cur.batchWire == 0:
		return true
	}
	need := float64(cur.batchWire) * (1 + cur.ratio)
	if cur.inflate > 1 {
		need *= cur.inflate
	}
	return need <= float64(share-cur.held)
}

// queued takes a fetched batch into the cursor's queue, sets aside the
// JSON it is expected to decode into, and counts both as held. c.mu is
// held.
func (cur *Cursor) queued(b PolledBatch) {
	if b.wire > 0 {
		cur.inflate = growRatio(cur.inflate, float64(b.Bytes)/float64(b.wire))
	}
	if b.largest > 0 {
		cur.batchWire = int64(b.largest)
	}
	if cur.ratio > 0 && b.Bytes > 0 {
		b.Reserved = int(float64(b.Bytes) * cur.ratio)
	}
	cur.queue = append(cur.queue, b)
	cur.held += batchCost(b)
	cur.c.held.Add(batchCost(b))
}

// growRatio is a ratio that follows a larger sample at once and a smaller one
// slowly (ratioFloor).
func growRatio(old, sample float64) float64 {
	if sample < old {
		return ratioFloor*old + (1-ratioFloor)*sample
	}
	return sample
}

// batchCost is what a queued batch holds of the budget: its bytes and the
// room set aside for its JSON.
func batchCost(b PolledBatch) int64 { return int64(b.Bytes + b.Reserved) }

// Share is the part of the budget the cursor may hold now.
func (cur *Cursor) Share() int64 {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	return cur.c.share()
}

// TakeRoom holds what is left of the cursor's share of the budget for the
// reader to decode into, so that nothing is fetched into it meanwhile,
// and returns it (0 when the share is used up). Decoded gives back what
// the JSON did not take.
func (cur *Cursor) TakeRoom() int {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	// Within what is left of the whole budget too: a cursor that held
	// its share before others joined holds more than its share now.
	room := min(cur.c.share()-cur.held, int64(cur.c.cfg.MaxBufferBytes)-cur.c.held.Load())
	if room <= 0 {
		return 0
	}
	cur.held += room
	cur.c.held.Add(room)
	return int(room)
}

// Decoded settles what the reader decoded: raw fetched bytes (the batches'
// Bytes) became decoded bytes of JSON, against reserved bytes set aside
// for them (the batches' Reserved, and what TakeRoom gave). The difference is held, or given back,
// until Free; the ratio sets later reservations and fetch limits.
func (cur *Cursor) Decoded(raw, reserved, decoded int) {
	cur.c.mu.Lock()
	defer cur.c.mu.Unlock()
	if raw > 0 {
		// A floor above 0 marks the ratio known.
		cur.ratio = max(growRatio(cur.ratio, float64(decoded)/float64(raw)), 1e-3)
	}
	switch d := int64(decoded - reserved); {
	case d > 0:
		cur.held += d
		cur.c.held.Add(d)
	case d < 0:
		cur.release(-d)
	}
}
