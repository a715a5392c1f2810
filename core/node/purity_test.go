package node

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNodeIsPure extends core's purity rule (DESIGN.md, STYLE.md 1) to
// core/node: its own code does no I/O, reads no clock, takes no lock,
// starts no goroutine, uses no channel and no global randomness.
func TestNodeIsPure(t *testing.T) {
	forbidden := map[string]bool{"os": true, "net": true, "net/http": true, "syscall": true, "sync": true, "sync/atomic": true,
		"math/rand": true, "math/rand/v2": true, "crypto/rand": true, "io/ioutil": true, "os/exec": true, "log": true, "log/slog": true,
		"github.com/quic-go/quic-go": true, "github.com/tidwall/wal": true, "time": true, "unsafe": true, "io": true, "bufio": true}
	files, _ := filepath.Glob("*.go")
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if forbidden[path] || strings.HasPrefix(path, "github.com/quic-go/") || strings.HasPrefix(path, "github.com/fibril-go/fibril/io/") {
				t.Errorf("%s imports %s", name, path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s starts a goroutine", name)
			case *ast.SelectStmt:
				t.Errorf("%s selects on channels", name)
			case *ast.ChanType:
				t.Errorf("%s uses a channel", name)
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
					t.Errorf("%s uses time.%s", name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 8 {
		t.Fatalf("checked only %d files: is the test in core/node/?", checked)
	}
}
