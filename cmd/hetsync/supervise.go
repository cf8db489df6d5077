package main

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
)

// superviseCommand is the host side of a multi-host launch: the launcher runs it over SSH, once
// per host, and talks to it on stdin and stdout (launcher.Supervise). It is hidden: nobody
// types it.
func superviseCommand() *cli.Command {
	return &cli.Command{
		Name:   "_supervise",
		Hidden: true,
		Usage:  "run the ranks a launcher sends over stdin (started by hetsync's SSH launcher)",
		Action: func(c *cli.Context) error {
			return launcher.Supervise(c.Context, os.Stdin, os.Stdout)
		},
	}
}

// supervisorCommand runs the supervisor on remote hosts: --remote-hetsync, else --remote-bin
// when the ranks are this hetsync itself (bench, train), else this executable's path. Nil
// (this executable cannot be found) leaves the launcher's own default and its error.
func supervisorCommand(c *cli.Context, command []string) []string {
	path := c.String("remote-hetsync")
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil
		}
		path = exe
		if rb := c.String("remote-bin"); rb != "" && len(command) > 0 && command[0] == exe {
			path = rb
		}
	}
	return []string{path, "_supervise"}
}
