package cohort

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

// TestCohortIsPure enforces STYLE.md §1 and the brief of this package: its
// own (non-test) code imports only an allow-list of the standard library
// and core itself (no core/node, no io/, no transport), starts no
// goroutine, uses no channel and reads no clock. An allow-list rather than
// core's deny-list, since the package has so little reason to import
// anything.
func TestCohortIsPure(t *testing.T) {
	allowed := map[string]bool{"bytes": true, "encoding/hex": true, "errors": true, "fmt": true, "math": true,
		"math/bits": true, "slices": true, "github.com/fibril-go/fibril/core": true}
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
			if path, _ := strconv.Unquote(imp.Path.Value); !allowed[path] {
				t.Errorf("%s imports %s, which is not on the allow-list", name, path)
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
				if id, ok := n.X.(*ast.Ident); ok && (id.Name == "time" || id.Name == "rand") {
					t.Errorf("%s uses %s.%s", name, id.Name, n.Sel.Name)
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked only %d files: is the test in core/cohort?", checked)
	}
}
