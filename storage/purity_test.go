package storage

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStorageIsPure: the storage packages the simulator runs (storage,
// fsys, simfs, simwal) import nothing that touches real files, sockets,
// clocks, locks or global randomness, start no goroutine and use no
// channel, so that the simulator runs them deterministically.
func TestStorageIsPure(t *testing.T) {
	forbiddenImports := []string{"os", "syscall", "net", "sync", "math/rand", "crypto/rand", "io/ioutil", "unsafe",
		"golang.org/x/sys", "github.com/tidwall/wal", "github.com/quic-go"}
	forbiddenTime := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true}
	checked := 0
	for _, dir := range []string{".", "fsys", "simfs", "simwal"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			checked++
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, file, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range forbiddenImports {
					if path == bad || strings.HasPrefix(path, bad+"/") {
						t.Errorf("%s imports %s", file, path)
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s: a goroutine at %s", file, fset.Position(n.Pos()))
				case *ast.ChanType:
					t.Errorf("%s: a channel at %s", file, fset.Position(n.Pos()))
				case *ast.SelectStmt:
					t.Errorf("%s: a select at %s", file, fset.Position(n.Pos()))
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "time" && forbiddenTime[n.Sel.Name] {
						t.Errorf("%s: time.%s at %s", file, n.Sel.Name, fset.Position(n.Pos()))
					}
				}
				return true
			})
		}
	}
	if checked < 15 {
		t.Fatalf("checked only %d files", checked)
	}
}
