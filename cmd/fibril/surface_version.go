package main

import "runtime/debug"

// version is what the admin overview names: the module version the binary
// was built from ("(devel)" for a local build), with the VCS revision when
// the build recorded one.
var version = buildVersion()

func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += "+" + s.Value[:12]
		}
	}
	return v
}
