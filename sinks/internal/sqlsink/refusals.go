package sqlsink

import (
	"fmt"
	"slices"
)

// JoinRefusals is the refusals of several tables as one error, on one
// line (a command prints it whole), wrapping each; nil entries are none.
func JoinRefusals(errs []error) error {
	errs = slices.DeleteFunc(errs, func(err error) bool { return err == nil })
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w; and %w", errs[0], JoinRefusals(errs[1:]))
}
