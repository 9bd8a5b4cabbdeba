package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/offsetkeeper/offsetkeeper/sinks"
)

// GroupsDir is the directory under the sink's directory where
// ClaimDestination records the group of each topic: one file per topic,
// named as the topic, holding the group's name.
const GroupsDir = ".offsetkeeper-groups"

// ClaimDestination records group as the writer of each of topics in the
// sink's directory (sinks.DestinationClaimer): DIR/.offsetkeeper-groups/TOPIC
// is created holding the group's name where it is missing. A topic recorded
// for another group is refused, with an error wrapping
// sinks.ErrDestinationClaimed, before anything is recorded, unless shared.
// Two groups claiming one topic at once cannot both win: the file appears
// whole or not at all (a hard link), and the loser reads the winner's.
func (s *Sink) ClaimDestination(ctx context.Context, group string, topics []string, shared bool) error {
	if group == "" || strings.ContainsAny(group, "\n\x00") {
		return fmt.Errorf("claim file://%s: group %q: want a group name", s.dir, group)
	}
	for _, t := range topics {
		if err := checkTopic(t); err != nil {
			return fmt.Errorf("claim file://%s: %w", s.dir, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("claim file://%s: %w", s.dir, err)
	}
	gdir := filepath.Join(s.dir, GroupsDir)
	owners := map[string]string{}
	var free []string
	for _, t := range topics {
		owner, err := readOwner(filepath.Join(gdir, t))
		switch {
		case err != nil:
			return fmt.Errorf("claim file://%s: %w", s.dir, err)
		case owner == "":
			free = append(free, t)
		case owner != group:
			owners[t] = owner
		}
	}
	if len(owners) > 0 && !shared {
		return s.claimed(group, owners)
	}
	if len(free) == 0 {
		return nil
	}
	if err := os.Mkdir(gdir, 0o755); err == nil {
		if err := syncDir(s.dir); err != nil {
			return fmt.Errorf("claim file://%s: %w", s.dir, err)
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("claim file://%s: %w", s.dir, err)
	}
	for _, t := range free {
		owner, err := recordOwner(gdir, t, group)
		if err != nil {
			return fmt.Errorf("claim file://%s: topic %s: %w", s.dir, t, err)
		}
		if owner != group {
			owners[t] = owner // another group came first, just now
		}
	}
	if err := syncDir(gdir); err != nil {
		return fmt.Errorf("claim file://%s: %w", s.dir, err)
	}
	if len(owners) > 0 && !shared {
		return s.claimed(group, owners)
	}
	return nil
}

// claimed is the error of a claim refused: which topics, whose, and how to
// forget a group that no longer writes here.
func (s *Sink) claimed(group string, owners map[string]string) error {
	var parts []string
	for _, t := range sortedKeys(owners) {
		parts = append(parts, fmt.Sprintf("topic %s is written here by group %q (recorded in %s)",
			t, owners[t], filepath.Join(s.dir, GroupsDir, t)))
	}
	return fmt.Errorf("file://%s: %s, not by group %q: each group delivers every record once, so a reader of the directory would see them twice; "+
		"if that group no longer writes here, remove the file: %w", s.dir, strings.Join(parts, "; "), group, sinks.ErrDestinationClaimed)
}

// readOwner returns the group recorded in path, "" when there is none.
func readOwner(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	owner := strings.TrimSpace(string(b))
	if owner == "" {
		return "", fmt.Errorf("%s is empty: want the name of the group writing the topic here (or no file)", path)
	}
	return owner, nil
}

// recordOwner records group for topic in gdir unless a group is recorded
// already, and returns the group recorded.
func recordOwner(gdir, topic, group string) (string, error) {
	path := filepath.Join(gdir, topic)
	tmp := filepath.Join(gdir, tmpPrefix+strconv.FormatUint(rand.Uint64(), 36))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	_, err = f.WriteString(group + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	// link, not rename: it fails when the name exists, so the first group
	// recorded stays.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return readOwner(path)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
