package ctl

// The command tree and shell completion.
//
// Invariants:
//   - The completion scripts are generated from this tree, so a new command
//     completes without touching them.

import (
	"flag"
	"fmt"
	"sort"
	"strings"
)

func tree(prog string) *command {
	root := &command{
		name:    prog,
		summary: "fibrilctl: operate a Fibril broker (queues over the wire protocol, the rest over the admin HTTP API)",
		subs: []*command{
			queueCmd(),
			{
				name: "admin", summary: "inspect and change the broker through its admin API",
				subs: []*command{
					adminQueuesCmd(), adminMessagesCmd(), adminTopologyCmd(), adminGlobalDLQCmd(), adminDLQCmd(),
					adminReloadTLSCmd(), adminQuarantineCmd(), adminRuntimeSettingsCmd(), adminAuditCmd(),
					adminConnectionsCmd(),
				},
			},
			userCmd(),
			certCmd(),
			secretCmd(),
			completionCmd(),
		},
	}
	return root.link()
}

func completionCmd() *command {
	return &command{
		name: "completion", summary: "print a shell completion script: bash, zsh or fish",
		args: "bash|zsh|fish", minArgs: 1, maxArgs: 1,
		long: "bash: source <(fibrilctl completion bash)\nzsh:  fibrilctl completion zsh > \"${fpath[1]}/_fibrilctl\"\nfish: fibrilctl completion fish > ~/.config/fish/completions/fibrilctl.fish",
		action: func(r *run) error {
			root := r.cmd
			for root.parent != nil {
				root = root.parent
			}
			// Completion is for the fibrilctl binary (`fibril ctl` has the
			// same commands; completing a two-word command is not portable).
			name := root.name
			if strings.Contains(name, " ") {
				name = "fibrilctl"
			}
			switch r.args[0] {
			case "bash":
				r.out("%s", bashCompletion(root, name))
			case "zsh":
				r.out("#compdef %s\n%s\n", name, zshShim(name))
			case "fish":
				r.out("%s", fishCompletion(root, name))
			default:
				return &usageError{cmd: r.cmd, msg: fmt.Sprintf("unknown shell %q: want bash, zsh or fish", r.args[0])}
			}
			return nil
		},
	}
}

// flagNames lists c's flags (own and global) as --name.
func flagNames(c *command) []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	if c.flags != nil {
		c.flags(fs)
	}
	(&globals{}).register(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
	names = append(names, "--help")
	sort.Strings(names)
	return names
}

// walk visits every command with its path below the root (e.g. "admin dlq").
func walk(c *command, path []string, visit func(c *command, path []string)) {
	visit(c, path)
	for _, s := range c.subs {
		walk(s, append(append([]string{}, path...), s.name), visit)
	}
}

func funcName(name string) string { return strings.NewReplacer("-", "_", ".", "_").Replace(name) }

// bashCompletion completes by the words typed so far: the deepest command
// path matched names the candidate subcommands or flags.
func bashCompletion(root *command, name string) string {
	var b strings.Builder
	fn := "_" + funcName(name)
	fmt.Fprintf(&b, "# bash completion for %s\n%s() {\n", name, fn)
	b.WriteString("  local cur=\"${COMP_WORDS[COMP_CWORD]}\" path=\"\" w i\n")
	b.WriteString("  for ((i=1; i<COMP_CWORD; i++)); do w=\"${COMP_WORDS[i]}\"; [[ $w == -* ]] && continue\n")
	b.WriteString("    case \"${path:+$path }$w\" in\n")
	walk(root, nil, func(c *command, path []string) {
		if len(path) > 0 {
			fmt.Fprintf(&b, "      \"%s\") path=\"%s\";;\n", strings.Join(path, " "), strings.Join(path, " "))
		}
	})
	b.WriteString("    esac\n  done\n  local words=\"\"\n  case \"$path\" in\n")
	walk(root, nil, func(c *command, path []string) {
		var words []string
		for _, s := range c.subs {
			words = append(words, s.name)
		}
		if len(c.subs) == 0 {
			words = flagNames(c)
			if c.name == "completion" {
				words = append([]string{"bash", "zsh", "fish"}, words...)
			}
		} else {
			words = append(words, "--help")
		}
		fmt.Fprintf(&b, "    \"%s\") words=\"%s\";;\n", strings.Join(path, " "), strings.Join(words, " "))
	})
	b.WriteString("  esac\n  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\n")
	fmt.Fprintf(&b, "complete -o default -F %s %s\n", fn, name)
	return b.String()
}

// zshShim uses bash completion through zsh's bashcompinit, so both shells
// complete the same words.
func zshShim(name string) string {
	return "autoload -U +X bashcompinit && bashcompinit\n" +
		"source <(" + name + " completion bash)"
}

func fishCompletion(root *command, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# fish completion for %s\ncomplete -c %s -f\n", name, name)
	walk(root, nil, func(c *command, path []string) {
		cond := "__fish_use_subcommand"
		if len(path) > 0 {
			parts := make([]string, len(path))
			for i, p := range path {
				parts[i] = "__fish_seen_subcommand_from " + p
			}
			cond = strings.Join(parts, "; and ")
		}
		for _, s := range c.subs {
			fmt.Fprintf(&b, "complete -c %s -n '%s' -a %s -d %q\n", name, cond, s.name, s.summary)
		}
		if len(c.subs) == 0 {
			for _, f := range flagNames(c) {
				fmt.Fprintf(&b, "complete -c %s -n '%s' -l %s\n", name, cond, strings.TrimPrefix(f, "--"))
			}
		}
	})
	return b.String()
}
