package ctl

// Reading a password from a Linux terminal without echo.

import (
	"bufio"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// readPasswordNoEcho reads one line from the terminal on f with echo off,
// restoring the terminal's mode afterwards. ok is false when f is not a
// terminal whose mode could be changed (the caller then reads with echo).
func readPasswordNoEcho(f *os.File) (password string, ok bool, err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", false, nil
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return "", false, nil
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
	line, err := bufio.NewReader(io.LimitReader(f, passwordBytesMax+1)).ReadString('\n')
	if err != nil && err != io.EOF {
		return "", true, err
	}
	return strings.TrimRight(line, "\r\n"), true, nil
}
