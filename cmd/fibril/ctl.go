package main

import "github.com/fibril-go/fibril/ctl"

func init() {
	register("ctl", "operate a broker: the fibrilctl commands (queue, admin, user, cert, secret)", func(args []string) int {
		return ctl.Main("fibril ctl", args, ctl.OSEnv())
	})
}
