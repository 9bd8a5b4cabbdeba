package clickhouse

import "unicode/utf8"

// scanFlat reads a JSON object of plain fields (strings without escapes
// and in ASCII, numbers, true, false, null) into fields: each field's
// text at the index cols gives its name, a later field of the same name
// replacing an earlier one, as encoding/json decodes an object. It reports
// false, with fields unspecified, for any other value (nested values,
// escapes, invalid JSON): that one is for encoding/json.
func scanFlat(v []byte, cols *fieldIndex, fields [][]byte) bool {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return false
	}
	i = skipSpace(v, i+1)
	if i < len(v) && v[i] == '}' {
		return skipSpace(v, i+1) == len(v)
	}
	for pos := 0; ; pos++ {
		if i >= len(v) || v[i] != '"' {
			return false
		}
		end := plainString(v, i)
		if end < 0 {
			return false
		}
		key := v[i+1 : end-1]
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ':' {
			return false
		}
		i = skipSpace(v, i+1)
		end = scalarEnd(v, i)
		if end < 0 {
			return false
		}
		if j := cols.find(pos, key); j >= 0 {
			fields[j] = v[i:end]
		}
		i = skipSpace(v, end)
		if i >= len(v) {
			return false
		}
		switch v[i] {
		case ',':
			i = skipSpace(v, i+1)
		case '}':
			return skipSpace(v, i+1) == len(v)
		default:
			return false
		}
	}
}

// fieldIndex finds the column of a JSON field by its name. The records of
// a topic mostly list their fields in one order, so the column found at
// each position of the last object is tried first: a compare of the name
// instead of a hash and a map lookup.
type fieldIndex struct {
	cols  map[string]int // the column of each field name
	names []string       // each column's field name, by column
	// at is the column found at each position of the objects read so far.
	at []int
}

// newFieldIndex indexes the fields that cols names.
func newFieldIndex(cols map[string]int) *fieldIndex {
	x := &fieldIndex{cols: cols}
	for name, j := range cols {
		for len(x.names) <= j {
			x.names = append(x.names, "")
		}
		x.names[j] = name
	}
	return x
}

// maxRemembered bounds the positions a fieldIndex remembers.
const maxRemembered = 256

// find is the column of the field named key at position pos of an object,
// or -1 for a field no column takes.
func (x *fieldIndex) find(pos int, key []byte) int {
	if pos < len(x.at) {
		if j := x.at[pos]; j >= 0 && x.names[j] == string(key) {
			return j
		}
	}
	j, ok := x.cols[string(key)]
	if !ok {
		return -1
	}
	for len(x.at) <= pos && len(x.at) < maxRemembered {
		x.at = append(x.at, -1)
	}
	if pos < len(x.at) {
		x.at[pos] = j
	}
	return j
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// plainString is one past the closing quote of the string at v[i], or -1
// for one with an escape, a byte outside printable ASCII, or no end.
func plainString(v []byte, i int) int {
	for j := i + 1; j < len(v); j++ {
		switch c := v[j]; {
		case c == '"':
			return j + 1
		case c == '\\' || c < ' ' || c >= utf8.RuneSelf:
			return -1
		}
	}
	return -1
}

// scalarEnd is one past the plain string, number, true, false or null at
// v[i], or -1.
func scalarEnd(v []byte, i int) int {
	if i >= len(v) {
		return -1
	}
	switch v[i] {
	case '"':
		return plainString(v, i)
	case 't':
		return literal(v, i, "true")
	case 'f':
		return literal(v, i, "false")
	case 'n':
		return literal(v, i, "null")
	}
	return numberEnd(v, i)
}

func literal(v []byte, i int, lit string) int {
	if len(v)-i >= len(lit) && string(v[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

// numberEnd is one past the JSON number at v[i] (-?int frac? exp?), or -1.
func numberEnd(v []byte, i int) int {
	if i < len(v) && v[i] == '-' {
		i++
	}
	switch {
	case i < len(v) && v[i] == '0':
		i++
	case i < len(v) && v[i] >= '1' && v[i] <= '9':
		i = digits(v, i)
	default:
		return -1
	}
	if i < len(v) && v[i] == '.' {
		j := digits(v, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		j := digits(v, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(v []byte, i int) int {
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	return i
}
