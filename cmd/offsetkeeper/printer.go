package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// view is what a command prints: a table for people and a JSON value (an
// array or an object with snake_case fields) for programs.
type view interface {
	columns() []string
	rows() [][]string
	jsonValue() any
}

// print writes v to w in the chosen format.
func (f outputFlag) print(w io.Writer, v view) error {
	if f.format == outputJSON {
		return printJSON(w, v.jsonValue())
	}
	return printTable(w, v.columns(), v.rows())
}

// printTable writes headers (in capitals, as kafka-consumer-groups.sh prints
// them) and rows as columns aligned with two spaces between them.
func printTable(w io.Writer, headers []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// printJSON writes v indented, ending with a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// dash is how a table shows a value that is not known or does not exist;
// JSON shows null.
const dash = "-"

func intCell(v *int64) string {
	if v == nil {
		return dash
	}
	return strconv.FormatInt(*v, 10)
}

func strCell(s string) string {
	if s == "" {
		return dash
	}
	return s
}

// age is how long ago t was, in the largest whole unit: "45s", "12m", "5h",
// "3d". A time in the future (clocks apart) reads "0s"; the zero time "-".
func age(now, t time.Time) string {
	if t.IsZero() {
		return dash
	}
	return shortDuration(now.Sub(t))
}

// shortDuration is d in its largest whole unit: s, m, h or d.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int64(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int64(d/(24*time.Hour)))
	}
}
