package format

import (
	"encoding/base64"
	"math"
	"math/big"
	"strconv"
)

// The JSON writers the transcoders share. Each appends one JSON value to
// dst and returns it; none allocates beyond growing dst.

const hexDigits = "0123456789abcdef"

// appendKey appends name as a JSON object key with its colon.
func appendKey(dst []byte, name string) []byte {
	return append(AppendJSONString(dst, []byte(name)), ':')
}

// appendFloat appends f as encoding/json would, and null for NaN and the
// infinities, which JSON has no number for: a column of floats then gets
// NULL rather than a string it cannot take.
func appendFloat(dst []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	// encoding/json's choice of notation, so that both write one text.
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			fmt = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, fmt, -1, bits)
	if fmt == 'e' {
		// e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

// appendBase64 appends b as a JSON string in standard base64 with padding,
// as encoding/json and protojson write bytes.
func appendBase64(dst, b []byte) []byte {
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// The range of the timestamps and dates written, that of protojson's
// Timestamp: years 1 to 9999, whose RFC 3339 text has four digits.
const (
	minUnixSeconds = -62135596800 // 0001-01-01T00:00:00Z
	maxUnixSeconds = 253402300799 // 9999-12-31T23:59:59Z
	secondsPerDay  = 86400
)

// appendTimestamp appends the RFC 3339 text of sec seconds and nsec
// nanoseconds (0 <= nsec < 1e9) after the Unix epoch, with a Z when utc, and
// 0, 3, 6 or 9 fractional digits as needed (as protojson). It reports false,
// writing nothing, when the time is outside years 1 to 9999.
func appendTimestamp(dst []byte, sec int64, nsec int32, utc bool) ([]byte, bool) {
	if sec < minUnixSeconds || sec > maxUnixSeconds {
		return dst, false
	}
	days, secOfDay := floorDiv(sec, secondsPerDay)
	dst = appendCivilDate(dst, days)
	dst = append(dst, 'T')
	dst = appendClock(dst, secOfDay, nsec)
	if utc {
		dst = append(dst, 'Z')
	}
	return dst, true
}

// appendDate appends the date days after 1970-01-01 as "2024-05-01", or
// reports false for one outside years 1 to 9999.
func appendDate(dst []byte, days int64) ([]byte, bool) {
	if days < minUnixSeconds/secondsPerDay || days > maxUnixSeconds/secondsPerDay {
		return dst, false
	}
	return appendCivilDate(dst, days), true
}

// appendTimeOfDay appends the time nsec nanoseconds after midnight as
// "12:00:00.123", or reports false when that is not within a day.
func appendTimeOfDay(dst []byte, nsec int64) ([]byte, bool) {
	if nsec < 0 || nsec >= secondsPerDay*1e9 {
		return dst, false
	}
	return appendClock(dst, nsec/1e9, int32(nsec%1e9)), true
}

// appendCivilDate writes the proleptic Gregorian date of days after the
// epoch (Howard Hinnant's days_from_civil, inverted), years 1 to 9999.
func appendCivilDate(dst []byte, days int64) []byte {
	z := days + 719468
	era, doe := floorDiv(z, 146097)
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	if m <= 2 {
		y++
	}
	dst = appendDigits(dst, y, 4)
	dst = append(dst, '-')
	dst = appendDigits(dst, m, 2)
	dst = append(dst, '-')
	return appendDigits(dst, d, 2)
}

// appendClock writes hh:mm:ss of secOfDay and the fraction of nsec.
func appendClock(dst []byte, secOfDay int64, nsec int32) []byte {
	dst = appendDigits(dst, secOfDay/3600, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, secOfDay/60%60, 2)
	dst = append(dst, ':')
	dst = appendDigits(dst, secOfDay%60, 2)
	return appendFraction(dst, nsec)
}

// appendFraction writes "" for 0, else a point and 3, 6 or 9 digits of
// nsec (0 <= nsec < 1e9), as protojson.
func appendFraction(dst []byte, nsec int32) []byte {
	switch {
	case nsec == 0:
		return dst
	case nsec%1e6 == 0:
		return appendDigits(append(dst, '.'), int64(nsec/1e6), 3)
	case nsec%1e3 == 0:
		return appendDigits(append(dst, '.'), int64(nsec/1e3), 6)
	default:
		return appendDigits(append(dst, '.'), int64(nsec), 9)
	}
}

// appendDigits writes v (>= 0) in exactly n digits, zero-padded.
func appendDigits(dst []byte, v int64, n int) []byte {
	var buf [20]byte
	for i := n - 1; i >= 0; i-- {
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, buf[:n]...)
}

// floorDiv returns the quotient rounded down and the remainder, >= 0.
func floorDiv(a, b int64) (q, r int64) {
	q, r = a/b, a%b
	if r < 0 {
		q--
		r += b
	}
	return q, r
}

// Protobuf Duration's range: ±10,000 years of seconds.
const maxDurationSeconds = 315576000000

// appendDuration appends a protobuf Duration as protojson writes it
// ("1.5s", "-0.000001s"), or reports false for one out of its range or
// whose seconds and nanos disagree in sign.
func appendDuration(dst []byte, sec int64, nsec int32) ([]byte, bool) {
	if sec < -maxDurationSeconds || sec > maxDurationSeconds || nsec <= -1e9 || nsec >= 1e9 ||
		sec > 0 && nsec < 0 || sec < 0 && nsec > 0 {
		return dst, false
	}
	if sec < 0 || nsec < 0 {
		dst = append(dst, '-')
		sec, nsec = -sec, -nsec
	}
	dst = strconv.AppendInt(dst, sec, 10)
	dst = appendFraction(dst, nsec)
	return append(dst, 's'), true
}

// appendDecimal appends the two's-complement big-endian integer b scaled
// down by scale decimal digits as an exact JSON number ("12.34", "-0.05",
// "1200" for scale 0), keeping the scale's trailing zeros. It reports false
// when the number has more than precision digits (precision <= 0: no
// limit).
func appendDecimal(dst, b []byte, precision, scale int) ([]byte, bool) {
	var buf [24]byte
	var digits []byte
	neg := len(b) > 0 && b[0]&0x80 != 0
	if len(b) <= 8 {
		// The common case, in an int64: sign-extend the bytes.
		var v int64
		if neg {
			v = -1
		}
		for _, c := range b {
			v = v<<8 | int64(c)
		}
		mag := uint64(v)
		if neg {
			mag = -mag // two's complement: also right for MinInt64
		}
		digits = strconv.AppendUint(buf[:0], mag, 10)
	} else {
		var v big.Int
		v.SetBytes(b)
		if neg {
			// The magnitude is 2^(8 len(b)) - v.
			var m big.Int
			m.Lsh(big.NewInt(1), uint(8*len(b)))
			v.Sub(&m, &v)
		}
		digits = v.Append(buf[:0], 10)
	}
	significant := len(digits)
	if significant == 1 && digits[0] == '0' {
		significant = 0
	}
	if precision > 0 && significant > precision {
		return dst, false
	}
	if neg {
		dst = append(dst, '-')
	}
	switch {
	case scale <= 0:
		dst = append(dst, digits...)
	case len(digits) > scale:
		dst = append(dst, digits[:len(digits)-scale]...)
		dst = append(dst, '.')
		dst = append(dst, digits[len(digits)-scale:]...)
	default:
		dst = append(dst, '0', '.')
		for range scale - len(digits) {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	}
	return dst, true
}
