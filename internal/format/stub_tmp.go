package format

import (
	"errors"

	"github.com/offsetkeeper/offsetkeeper/internal/registry"
)

func compileJSONSchema(s *registry.Schema) (codec, error) {
	return nil, errors.New("not supported yet")
}
