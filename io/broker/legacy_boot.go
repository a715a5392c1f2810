package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// legacyBootName is where an older broker counted the boots of its data
// directory; the Node's log counts them now. The count is read at every
// start (the Node continues above it, node.Config.LegacyBootCount) and the
// file is left in place: it never changes again, and keeping it means a
// Node log lost with its boot records can still not reuse old tags.
const legacyBootName = "boot"

// readLegacyBoot returns the old boot count, 0 when there is none. A file
// that does not parse refuses the start: guessing low could hand out
// delivery tags an older run already used.
func readLegacyBoot(dataDir string) (uint64, error) {
	path := filepath.Join(dataDir, legacyBootName)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("legacy boot counter: %w", err)
	}
	count, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("legacy boot counter %s is corrupt (fix or remove it): %w", path, err)
	}
	return count, nil
}
