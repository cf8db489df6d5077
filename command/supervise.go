package command

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
