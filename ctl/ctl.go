// Package ctl is fibrilctl, the operator's command line (SPEC 12): one
// implementation behind both the `fibrilctl` binary and `fibril ctl`.
//
// Queue traffic (declare, publish, consume) goes over the wire protocol with
// the Go client in client/; everything else goes to the admin HTTP API
// (/admin/api/...), except the local file commands (cert, secret) which act on
// a data directory directly.
//
// Invariants:
//   - Main never calls os.Exit and never reads os.Args: it takes its streams
//     and environment from its caller, so tests run it in-process.
//   - Every failure leaves through exitError with one of the documented exit
//     codes (exitOK .. exitUnreachable); a script can branch on them.
//   - Every command and subcommand answers --help (exit 0) and refuses an
//     unknown flag or a missing argument with exit 2 and its usage.
//   - --json prints the API's answer as JSON; without it a human table.
package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Exit codes scripts can branch on (docs/fibrilctl.md).
const (
	exitOK          = 0 // done
	exitFailed      = 1 // the operation failed (a server error, a consume that did not get what it expected)
	exitUsage       = 2 // bad flags or arguments, or input the server refused as bad (400)
	exitNotFound    = 3 // no such queue, user, message...
	exitConflict    = 4 // stale version, queue in use, settings group locked, already exists
	exitAuth        = 5 // credentials refused
	exitUnreachable = 6 // cannot reach the broker or the admin listener
)

// exitError is an error with the exit code it maps to.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// fail wraps err with an exit code.
func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// usageError is a bad invocation of one command: its usage is printed.
type usageError struct {
	cmd *command
	msg string
}

func (e *usageError) Error() string { return e.msg }

// errHelp: --help was asked for and printed; exit 0.
var errHelp = errors.New("help printed")

// Env is what Main runs against: its streams and environment.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads the environment (os.Getenv in production).
	Getenv func(string) string
	// StdinIsTerminal reports whether Stdin is a terminal (a password is then
	// prompted for).
	StdinIsTerminal func() bool
	// ReadPasswordNoEcho, when set, reads a line from the terminal with echo
	// off; ok false means it could not, and the line is read with echo.
	ReadPasswordNoEcho func() (password string, ok bool, err error)
}

// run is what one command invocation sees.
type run struct {
	env  Env
	g    *globals
	cmd  *command
	args []string // positional arguments
	ctx  context.Context
	fs   *flag.FlagSet
}

// isSet reports whether the flag name was given on the command line.
func (r *run) isSet(name string) bool {
	set := false
	r.fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func (r *run) out(format string, args ...any) { fmt.Fprintf(r.env.Stdout, format, args...) }

// command is one node of the command tree: a group (subs) or a leaf (action).
type command struct {
	name    string
	summary string
	// args names the positional arguments in the usage line, e.g. "<topic>".
	args string
	// minArgs and maxArgs bound the positional arguments (maxArgs -1: any).
	minArgs, maxArgs int
	// flags adds the command's own flags; the globals are added beside them.
	flags  func(fs *flag.FlagSet)
	action func(r *run) error
	subs   []*command
	parent *command
	// long is an optional paragraph printed under the usage line.
	long string
}

func (c *command) path() string {
	if c.parent == nil {
		return c.name
	}
	return c.parent.path() + " " + c.name
}

func (c *command) sub(name string) *command {
	for _, s := range c.subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

// link sets parent pointers below c.
func (c *command) link() *command {
	for _, s := range c.subs {
		s.parent = c
		s.link()
	}
	return c
}

// newFlagSet builds c's flag set: its own flags, then the globals bound to g.
func (c *command) newFlagSet(g *globals, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(c.path(), flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, by Main
	if c.flags != nil {
		c.flags(fs)
	}
	g.register(fs)
	return fs
}

// printUsage writes c's help to w.
func (c *command) printUsage(w io.Writer, g *globals) {
	if len(c.subs) > 0 {
		fmt.Fprintf(w, "Usage: %s <command> [flags]\n\n%s\n", c.path(), c.summary)
		if c.long != "" {
			fmt.Fprintf(w, "\n%s\n", c.long)
		}
		fmt.Fprintln(w, "\nCommands:")
		for _, s := range c.subs {
			fmt.Fprintf(w, "  %-16s %s\n", s.name, s.summary)
		}
		fmt.Fprintf(w, "\nRun '%s <command> --help' for a command's flags.\n", c.path())
		if c.parent == nil {
			fmt.Fprintf(w, "\nGlobal flags (accepted by every command, before or after it):\n")
			fs := flag.NewFlagSet("", flag.ContinueOnError)
			(&globals{}).register(fs)
			fs.SetOutput(w)
			fs.PrintDefaults()
			fmt.Fprint(w, exitCodesHelp)
		}
		return
	}
	line := c.path() + " [flags]"
	if c.args != "" {
		line = c.path() + " " + c.args + " [flags]"
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", line, c.summary)
	if c.long != "" {
		fmt.Fprintf(w, "\n%s\n", c.long)
	}
	own := flag.NewFlagSet("", flag.ContinueOnError)
	if c.flags != nil {
		c.flags(own)
	}
	n := 0
	own.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		fmt.Fprintln(w, "\nFlags:")
		own.SetOutput(w)
		own.PrintDefaults()
	}
	fmt.Fprintln(w, "\nGlobal flags: --config --broker --admin --username --password --tls --ca-file --pin-sha256 --server-name --quic --json --timeout (see 'fibrilctl --help').")
}

const exitCodesHelp = `
Exit codes: 0 ok, 1 the operation failed (server error), 2 usage or bad input,
3 not found, 4 conflict (stale version, in use, locked, exists), 5 auth
refused, 6 cannot reach the broker or the admin listener.
`

// Main runs fibrilctl with args (without the program name) and returns the
// exit code. prog is how the user called it ("fibrilctl" or "fibril ctl").
func Main(prog string, args []string, env Env) int {
	root := tree(prog)
	g := &globals{}
	err := dispatch(root, g, args, env)
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(env.Stderr, "%s: %s\n\n", ue.cmd.path(), ue.msg)
		ue.cmd.printUsage(env.Stderr, g)
		return exitUsage
	}
	code := exitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintf(env.Stderr, "%s: %v\n", prog, err)
	return code
}

// dispatch walks args down the tree to a leaf, parses its flags and runs it.
func dispatch(root *command, g *globals, args []string, env Env) error {
	c := root
	for len(c.subs) > 0 {
		// Flags before the command name are globals (or --help).
		fs := flag.NewFlagSet(c.path(), flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		g.register(fs)
		help := fs.Bool("help", false, "")
		fs.BoolVar(help, "h", false, "")
		if err := fs.Parse(args); err != nil {
			return &usageError{cmd: c, msg: err.Error()}
		}
		if *help {
			c.printUsage(env.Stdout, g)
			return errHelp
		}
		if len(fs.Args()) == 0 && c.action != nil {
			// A group with an action of its own ('admin connections'
			// lists): run it, parsing the same flags again below.
			break
		}
		args = fs.Args()
		if len(args) == 0 {
			return &usageError{cmd: c, msg: "missing command"}
		}
		if args[0] == "help" {
			c.printUsage(env.Stdout, g)
			return errHelp
		}
		next := c.sub(args[0])
		if next == nil {
			return &usageError{cmd: c, msg: fmt.Sprintf("unknown command %q%s", args[0], suggest(args[0], c))}
		}
		c, args = next, args[1:]
	}
	fs := c.newFlagSet(g, env.Stderr)
	help := fs.Bool("help", false, "")
	fs.BoolVar(help, "h", false, "")
	positional, err := parseInterleaved(fs, args)
	if *help {
		c.printUsage(env.Stdout, g)
		return errHelp
	}
	if err != nil {
		return &usageError{cmd: c, msg: err.Error()}
	}
	if len(positional) < c.minArgs {
		return &usageError{cmd: c, msg: "missing argument: want " + c.args}
	}
	if c.maxArgs >= 0 && len(positional) > c.maxArgs {
		return &usageError{cmd: c, msg: fmt.Sprintf("unexpected argument %q", positional[c.maxArgs])}
	}
	if err := g.resolve(env); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	r := &run{env: env, g: g, cmd: c, args: positional, ctx: ctx, fs: fs}
	return c.action(r)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments (`queue publish orders --message hi`), which the flag
// package alone stops at. A "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return positional, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// suggest names the nearest subcommand of c to name, if one is close.
func suggest(name string, c *command) string {
	best, bestDist := "", 3
	for _, s := range c.subs {
		if d := editDistance(name, s.name); d < bestDist {
			best, bestDist = s.name, d
		}
	}
	if best == "" {
		names := make([]string, 0, len(c.subs))
		for _, s := range c.subs {
			names = append(names, s.name)
		}
		sort.Strings(names)
		return "; the commands are " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
