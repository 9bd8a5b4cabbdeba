package credfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestPassword(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{
		{"s3cret\n", "s3cret"},
		{"s3cret\r\n", "s3cret"},
		{"s3cret", "s3cret"},
		{" spaced \n\n", " spaced "},
		{"\n", ""},
	} {
		p := filepath.Join(dir, "pw")
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Password(p)
		if err != nil || got != tc.want {
			t.Errorf("Password of %q = %q, %v; want %q", tc.content, got, err, tc.want)
		}
	}
	if _, err := Password(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Password of a missing file: %v, want os.ErrNotExist", err)
	}
}

func TestCAPool(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CAPool(p); !errors.Is(err, ErrNoPEM) {
		t.Errorf("CAPool of a file without PEM: %v, want ErrNoPEM", err)
	}
	if _, err := CAPool(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("CAPool of a missing file: %v, want os.ErrNotExist", err)
	}
}
