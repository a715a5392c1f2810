package ctl

// user add | passwd | remove | list, through the admin API.
//
// Invariants:
//   - A password is never taken from an argument position: --user-password P,
//     --user-password - (one line from stdin), or a prompt when stdin is a
//     terminal (without echo where the terminal allows); with none of those the command refuses (exit 2) rather than
//     create a user with an empty password.
//   - add refuses an existing user (exit 4) and passwd a missing one (exit 3):
//     the API's POST does both (add or change), so the command checks the list
//     first to say which was meant. The check and the write are two requests;
//     the answer's created says what the POST did, so a concurrent add (or
//     removal) in between is reported with the same exit code.

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// passwordBytesMax bounds a password read from stdin.
const passwordBytesMax = 4096

type userList struct {
	Users []struct {
		Name string `json:"name"`
	} `json:"users"`
}

func (r *run) userExists(name string) (bool, error) {
	var list userList
	if _, err := r.getJSON("/admin/api/users", nil, &list); err != nil {
		return false, err
	}
	for _, u := range list.Users {
		if u.Name == name {
			return true, nil
		}
	}
	return false, nil
}

// readPassword gets the new password from the flag, stdin or a prompt.
func (r *run) readPassword(flagValue string, given bool) (string, error) {
	switch {
	case given && flagValue != "-":
		if flagValue == "" {
			return "", &usageError{cmd: r.cmd, msg: "--user-password is empty"}
		}
		return flagValue, nil
	case given: // "-": read one line from stdin
	case r.env.StdinIsTerminal != nil && r.env.StdinIsTerminal():
		if r.env.ReadPasswordNoEcho != nil {
			fmt.Fprint(r.env.Stderr, "new password: ")
			pw, ok, err := r.env.ReadPasswordNoEcho()
			if ok {
				fmt.Fprintln(r.env.Stderr)
				if err != nil {
					return "", fail(exitUsage, "reading the password: %v", err)
				}
				if pw == "" {
					return "", fail(exitUsage, "the password is empty")
				}
				return pw, nil
			}
		}
		fmt.Fprint(r.env.Stderr, "new password (echoed): ")
	default:
		return "", &usageError{cmd: r.cmd, msg: "give --user-password P, or --user-password - to read it from stdin"}
	}
	line, err := bufio.NewReader(io.LimitReader(r.env.Stdin, passwordBytesMax+1)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", fail(exitUsage, "reading the password from stdin: %v", err)
	}
	if len(line) > passwordBytesMax {
		return "", fail(exitUsage, "the password on stdin is over %d bytes", passwordBytesMax)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return "", fail(exitUsage, "the password read from stdin is empty")
	}
	return password, nil
}

func userSetCmd(name, summary string, mustExist bool) *command {
	var password string
	return &command{
		name: name, summary: summary,
		args: "<user>", minArgs: 1, maxArgs: 1,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&password, "user-password", "", "the user's password; - reads one line from stdin (prompted for when omitted on a terminal)")
		},
		action: func(r *run) error {
			user := r.args[0]
			pw, err := r.readPassword(password, r.isSet("user-password"))
			if err != nil {
				return err
			}
			exists, err := r.userExists(user)
			if err != nil {
				return err
			}
			if exists && !mustExist {
				return fail(exitConflict, "user %q exists; change the password with 'user passwd %s'", user, user)
			}
			if !exists && mustExist {
				return fail(exitNotFound, "no user %q; add it with 'user add %s'", user, user)
			}
			var ans struct {
				Name    string `json:"name"`
				Created bool   `json:"created"`
			}
			raw, err := r.doJSON(http.MethodPost, "/admin/api/users", nil,
				map[string]string{"name": user, "password": pw}, &ans)
			if err != nil {
				return err
			}
			// The POST adds or changes: created tells which it did, so a
			// change between the check and the write is reported.
			if ans.Created == mustExist {
				if mustExist {
					return fail(exitNotFound, "user %q was removed meanwhile; it was added again with the new password", user)
				}
				return fail(exitConflict, "user %q was added by someone else meanwhile; its password is now the one given here", user)
			}
			if r.g.json.value {
				r.printJSON(raw)
				return nil
			}
			if ans.Created {
				r.out("added user %s\n", user)
			} else {
				r.out("changed the password of %s\n", user)
			}
			return nil
		},
	}
}

func userCmd() *command {
	return &command{
		name: "user", summary: "manage the broker's users (through the admin API)",
		subs: []*command{
			userSetCmd("add", "add a user", false),
			userSetCmd("passwd", "change a user's password", true),
			{
				name: "remove", summary: "remove a user",
				args: "<user>", minArgs: 1, maxArgs: 1,
				action: func(r *run) error {
					raw, err := r.doJSON(http.MethodDelete, "/admin/api/users/"+url.PathEscape(r.args[0]), nil, nil, nil)
					if err != nil {
						return err
					}
					if r.g.json.value {
						r.printJSON(raw)
						return nil
					}
					r.out("removed user %s\n", r.args[0])
					return nil
				},
			},
			{
				name: "list", summary: "list the users (names only; hashes are never listed)",
				action: func(r *run) error {
					var list userList
					raw, err := r.getJSON("/admin/api/users", nil, &list)
					if err != nil {
						return err
					}
					if r.g.json.value {
						r.printJSON(raw)
						return nil
					}
					if len(list.Users) == 0 {
						r.out("no users (fibril/fibril works from loopback only)\n")
						return nil
					}
					t := newTable("NAME")
					for _, u := range list.Users {
						t.add(u.Name)
					}
					t.print(r)
					return nil
				},
			},
		},
	}
}
