package command

import (
	"os"

	"github.com/urfave/cli/v2"
)

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

// sshPort is --ssh-port when given, else 0: the ssh config's Port for each host, or 22.
func sshPort(c *cli.Context) int {
	if c.IsSet("ssh-port") {
		return c.Int("ssh-port")
	}
	return 0
}
