package command

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hetsync/hetsync/launcher"
)

// envVars is a repeatable flag whose values are kept whole (no splitting at commas): -x.
type envVars []string

func (e *envVars) Set(v string) error {
	*e = append(*e, v)
	return nil
}

func (e *envVars) String() string {
	if e == nil {
		return ""
	}
	return strings.Join(*e, " ")
}

// jobFlags are the flags of every command that launches ranks (launch, bench, train): hosts,
// SSH, environment forwarding, output and the job's time limit. rendezvous adds
// --rendezvous (launch has its own).
func jobFlags(rendezvous bool) []cli.Flag {
	// Usage lines stay short; docs/multihost.md explains the hosts and SSH flags.
	flags := inCategory(catHosts,
		&cli.StringFlag{Name: "hosts", Aliases: []string{"H"}, Usage: "hosts and their slots, host1:2,host2:2 (no :N: 1 slot; \"localhost\" starts ranks here without SSH)"},
		&cli.StringFlag{Name: "hostfile", Usage: "file of hosts, one a line: \"host slots=N\" (Open MPI) or \"host:N\"; # comments"},
		&cli.BoolFlag{Name: "oversubscribe", Usage: "allow more ranks than slots"},
		&cli.StringFlag{Name: "ssh-user", DefaultText: "the current user; user@host in -H overrides", Usage: "SSH login user"},
		&cli.IntFlag{Name: "ssh-port", Value: 22, DefaultText: "the host's Port in the ssh config, else 22", Usage: "SSH port of every host"},
		&cli.StringFlag{Name: "ssh-config", Aliases: []string{"F"}, EnvVars: []string{"HETSYNC_SSH_CONFIG"}, DefaultText: "~/.ssh/config and /etc/ssh/ssh_config", Usage: "ssh_config file for Host aliases, HostName, User, Port, IdentityFile, ProxyJump (\"none\" for none)"},
		&cli.StringSliceFlag{Name: "ssh-identity", Aliases: []string{"i"}, DefaultText: "~/.ssh/id_ed25519, id_ecdsa, id_rsa", Usage: "private key file to log in with (repeatable)"},
		&cli.BoolFlag{Name: "ssh-no-agent", Usage: "do not offer the keys of ssh-agent (SSH_AUTH_SOCK)"},
		&cli.StringSliceFlag{Name: "ssh-known-hosts", DefaultText: "~/.ssh/known_hosts, /etc/ssh/ssh_known_hosts", Usage: "known_hosts file to check host keys against (repeatable)"},
		&cli.BoolFlag{Name: "ssh-insecure-skip-hostkey", Usage: "accept any host key (INSECURE: only on a trusted test network)"},
		&cli.DurationFlag{Name: "ssh-timeout", Value: 10 * time.Second, Usage: "SSH connection timeout"},
		&cli.StringFlag{Name: "remote-bin", DefaultText: "the same as here", Usage: "the program's path on remote hosts"},
		&cli.StringFlag{Name: "remote-hetsync", DefaultText: "--remote-bin for bench and train, else this executable's path", Usage: "hetsync's path on remote hosts, which runs their ranks"},
		&cli.StringFlag{Name: "remote-dir", DefaultText: "this directory when it exists there, else the login directory", Usage: "working directory on remote hosts"},
		&cli.GenericFlag{Name: "x", Value: &envVars{}, Category: catJob, Usage: "pass `VAR` (or set VAR=value) to every rank, remote ones included (repeatable)"},
		&cli.StringFlag{Name: "iface", Category: catTransport, DefaultText: "the one that routes to rank 0", Usage: "network interface whose address ranks advertise"},
		&cli.StringFlag{Name: "output-dir", Category: catOutput, Usage: "also write each rank's output to `DIR`/rank.N.log"},
		&cli.BoolFlag{Name: "timestamp-output", Category: catOutput, Usage: "start every output line with the time"},
		&cli.DurationFlag{Name: "timeout", Category: catJob, DefaultText: "no limit", Usage: "stop the job when it runs longer than this"},
	)
	if rendezvous {
		flags = append(flags, &cli.StringFlag{Name: "rendezvous", Category: catJob, DefaultText: "a free port on rank 0's host", Usage: "host:port for rank 0's rendezvous"})
	}
	return flags
}

// configureJob applies the job flags to job (whose NP may be 0 to fill every slot of the
// hosts) and, with -H or --hostfile, connects to the hosts and places the ranks. The returned
// function closes the connections; call it after job.Run.
func configureJob(c *cli.Context, job *launcher.Job) (func(), error) {
	noop := func() {}
	vars := *c.Generic("x").(*envVars)
	var forward []string
	for _, v := range vars {
		name, value, set := strings.Cut(v, "=")
		if name == "" {
			return noop, usagef("-x %q: want VAR or VAR=value", v)
		}
		if set {
			job.Env = append(job.Env, name+"="+value)
		} else if _, ok := os.LookupEnv(name); !ok {
			return noop, usagef("-x %s: the variable is not set here (use -x %s=VALUE)", name, name)
		}
		forward = append(forward, name)
	}
	job.Timeout = c.Duration("timeout")
	job.OutputDir = c.String("output-dir")
	job.Timestamps = c.Bool("timestamp-output")
	job.Iface = c.String("iface")
	if job.Timeout < 0 {
		return noop, usagef("--timeout %v: must not be negative", job.Timeout)
	}
	if c.IsSet("rendezvous") {
		job.Rendezvous = c.String("rendezvous")
	}
	var hosts []launcher.Host
	var err error
	switch {
	case c.IsSet("hosts") && c.IsSet("hostfile"):
		return noop, usagef("-H and --hostfile: give one of them")
	case c.IsSet("hosts"):
		hosts, err = launcher.ParseHostList(c.String("hosts"))
	case c.IsSet("hostfile"):
		hosts, err = launcher.ReadHostfile(c.String("hostfile"))
	default:
		if job.NP == 0 {
			return noop, usagef("--np: required without -H or --hostfile")
		}
		if job.Iface != "" && job.Rendezvous == "" {
			if job.Rendezvous, err = ifaceRendezvous(job.Iface); err != nil {
				return noop, err
			}
		}
		return noop, nil
	}
	if err != nil {
		return noop, usageError{err}
	}
	cfg := launcher.SSHConfig{
		User: c.String("ssh-user"), Port: sshPort(c), IdentityFiles: c.StringSlice("ssh-identity"), ConfigFile: c.String("ssh-config"),
		NoAgent: c.Bool("ssh-no-agent"), KnownHostsFiles: c.StringSlice("ssh-known-hosts"),
		InsecureSkipHostKey: c.Bool("ssh-insecure-skip-hostkey"), ConnectTimeout: c.Duration("ssh-timeout"),
		RemoteBin: c.String("remote-bin"), RemoteDir: c.String("remote-dir"), Forward: forward, Log: c.App.ErrWriter,
		SupervisorCommand: supervisorCommand(c, job.Command),
	}
	if err := cfg.Validate(); err != nil {
		return noop, usageError{err}
	}
	if minNP := c.Int("min-np"); minNP > 0 {
		if hosts, err = reachableHosts(c, cfg, hosts, job, minNP); err != nil {
			return noop, err
		}
	}
	place, err := launcher.Place(hosts, job.NP, c.Bool("oversubscribe"))
	if err != nil {
		return noop, usageError{err}
	}
	job.NP, job.Hosts, job.Placement = len(place), hosts, place
	sp, err := launcher.NewSSHSpawner(cfg, hosts, place)
	if err != nil {
		return noop, err
	}
	closeAll := func() { sp.Close() }
	if err := sp.Connect(c.Context); err != nil {
		closeAll()
		return noop, err
	}
	if job.Rendezvous == "" {
		if job.Rendezvous, err = sp.Rendezvous(c.Context, job.Iface); err != nil {
			closeAll()
			return noop, err
		}
	}
	job.Spawner = sp
	return closeAll, nil
}

// reachableHosts drops the hosts that do not answer an SSH login, as an elastic job
// (--min-np) starts on those that do, and shrinks job.NP to their slots, provided at least
// minNP ranks remain.
func reachableHosts(c *cli.Context, cfg launcher.SSHConfig, hosts []launcher.Host, job *launcher.Job, minNP int) ([]launcher.Host, error) {
	up, down, err := launcher.Reachable(c.Context, cfg, hosts)
	if err != nil {
		return nil, err
	}
	np, err := launcher.ElasticNP(up, job.NP, minNP, c.Bool("oversubscribe"), down)
	if err != nil {
		return nil, err
	}
	for _, e := range down {
		fmt.Fprintf(c.App.ErrWriter, "hetsync: dropping a host: %v\n", e)
	}
	if job.NP != 0 && np != job.NP {
		fmt.Fprintf(c.App.ErrWriter, "hetsync: starting %d rank(s) instead of %d on the reachable hosts (--min-np %d)\n", np, job.NP, minNP)
	}
	job.NP = np
	return up, nil
}

// ifaceRendezvous is a free port on iface's address, for single-host jobs with --iface.
func ifaceRendezvous(iface string) (string, error) {
	ip, err := launcher.InterfaceIP(iface)
	if err != nil {
		return "", usagef("--iface: %v", err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return "", fmt.Errorf("--iface %s: finding a free port on %s for the rendezvous: %w", iface, ip, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// hostsGiven reports whether the command line places ranks on hosts.
func hostsGiven(c *cli.Context) bool { return c.IsSet("hosts") || c.IsSet("hostfile") }

// runJob configures job from the job flags, runs it and closes the hosts' connections.
func runJob(c *cli.Context, job *launcher.Job) error {
	done, err := configureJob(c, job)
	if err != nil {
		return err
	}
	defer done()
	if err := job.Validate(); err != nil {
		return usageError{err}
	}
	return job.Run(c.Context)
}

// launchSelf starts np ranks of this same command line, with extra arguments appended,
// through the launcher; rank 0's output passes through unprefixed, and every rank's
// environment carries the transport settings its command line has. cmd names the command in
// errors.
func launchSelf(c *cli.Context, cmd string, np int, extra ...string) error {
	job, err := selfJob(c, cmd, np, extra...)
	if err != nil {
		return err
	}
	return runJob(c, job)
}

// selfJob is the job launchSelf runs.
func selfJob(c *cli.Context, cmd string, np int, extra ...string) (*launcher.Job, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: finding this executable to launch the ranks: %w", cmd, err)
	}
	args, _ := c.App.Metadata["args"].([]string)
	if len(args) < 2 {
		return nil, fmt.Errorf("%s: the original command line is not known; use hetsync launch", cmd)
	}
	return &launcher.Job{
		NP: np, Command: slices.Concat([]string{exe}, args[1:], extra), Env: os.Environ(),
		Stdout: c.App.Writer, Stderr: c.App.ErrWriter, Log: c.App.ErrWriter, UnprefixedRank0: true,
		Settings: netOptionsFrom(c).settings(),
	}, nil
}
