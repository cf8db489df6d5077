package command

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// version describes this build: the module version, or the VCS revision the binary was built
// from when it was built inside the repository.
func version() string {
	v, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += " " + rev
		if dirty {
			v += "+dirty"
		}
	}
	return fmt.Sprintf("hetsync %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			_, err := fmt.Fprintln(c.App.Writer, version())
			return err
		},
	}
}
