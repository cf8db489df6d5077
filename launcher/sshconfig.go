package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// sshConfigFile is what the launcher reads of ssh_config(5) files: the Host blocks and the
// keywords that decide where and as whom a host is reached (HostName, User, Port,
// IdentityFile, IdentitiesOnly, UserKnownHostsFile, ProxyJump). As in OpenSSH, the first
// value found for a host wins (IdentityFile and UserKnownHostsFile add up), Host patterns take
// * and ? and !negation, and Include pulls in more files. Other keywords are skipped;
// ProxyCommand is an error for the hosts it applies to (the launcher runs no command to reach
// a host), and a Match block, whose criteria the launcher cannot all evaluate, applies to no
// host and is reported.
type sshConfigFile struct {
	blocks []sshConfigBlock
	// Notes are warnings about what was read but not honoured, one per line.
	Notes []string
}

type sshConfigBlock struct {
	patterns []string // nil: before the first Host line, applies to every host
	never    bool     // a Match block
	opts     []sshConfigOption
}

type sshConfigOption struct {
	key  string // lower case
	args []string
	at   string // file:line
}

// maxIncludeDepth bounds Include chains, which a file including itself would make endless.
const maxIncludeDepth = 16

// readSSHConfig parses the files in order, as if they were one. A file that does not exist is
// skipped when optional; relDir resolves relative Include paths (~/.ssh for a user's file).
func readSSHConfig(files []string, optional bool, relDir string) (*sshConfigFile, error) {
	c := &sshConfigFile{}
	for _, f := range files {
		if err := c.parseFile(f, optional, relDir, 0, sshConfigBlock{}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// parseFile parses one file whose leading lines are in scope (the block of the Include line
// that names it; the zero block, which applies to every host, for a top-level file).
func (c *sshConfigFile) parseFile(name string, optional bool, relDir string, depth int, scope sshConfigBlock) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("ssh config %s: Include nested more than %d deep", name, maxIncludeDepth)
	}
	f, err := os.Open(name)
	if err != nil {
		if optional && errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("ssh config: %w", err)
	}
	defer f.Close()
	cur := &sshConfigBlock{patterns: scope.patterns, never: scope.never}
	flush := func() {
		if len(cur.opts) > 0 {
			c.blocks = append(c.blocks, *cur)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		at := fmt.Sprintf("%s:%d", name, n)
		key, args, err := splitConfigLine(sc.Text())
		if err != nil {
			return fmt.Errorf("ssh config %s: %v", at, err)
		}
		switch key {
		case "":
			continue
		case "host":
			if len(args) == 0 {
				return fmt.Errorf("ssh config %s: Host without a pattern", at)
			}
			flush()
			cur = &sshConfigBlock{patterns: args}
		case "match":
			flush()
			if len(args) == 1 && strings.EqualFold(args[0], "all") {
				cur = &sshConfigBlock{patterns: []string{"*"}}
			} else {
				c.Notes = append(c.Notes, fmt.Sprintf("ssh config %s: Match %s: not evaluated by hetsync; the block applies to no host",
					at, strings.Join(args, " ")))
				cur = &sshConfigBlock{never: true}
			}
		case "include":
			flush()
			for _, pat := range args {
				pat = expandHome(pat)
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(relDir, pat)
				}
				matches, err := filepath.Glob(pat)
				if err != nil {
					return fmt.Errorf("ssh config %s: Include %s: %v", at, pat, err)
				}
				for _, m := range matches {
					if err := c.parseFile(m, false, relDir, depth+1, *cur); err != nil {
						return err
					}
				}
			}
			// The including file's block goes on after the Include line.
			cur = &sshConfigBlock{patterns: cur.patterns, never: cur.never}
		default:
			if len(args) == 0 {
				return fmt.Errorf("ssh config %s: %s without a value", at, key)
			}
			cur.opts = append(cur.opts, sshConfigOption{key: key, args: args, at: at})
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("ssh config %s: %w", name, err)
	}
	flush()
	return nil
}

// splitConfigLine splits "Keyword args" or "Keyword=args" into the lower-case keyword and its
// arguments, honouring double quotes; a blank or comment line gives an empty keyword.
func splitConfigLine(line string) (string, []string, error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", nil, nil
	}
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return strings.ToLower(line), nil, nil
	}
	key := strings.ToLower(line[:i])
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, "=") {
		rest = strings.TrimLeft(rest[1:], " \t")
	}
	var args []string
	for rest != "" {
		if rest[0] == '#' {
			break
		}
		var arg string
		if rest[0] == '"' {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return "", nil, fmt.Errorf("%s: unterminated quote", key)
			}
			arg, rest = rest[1:1+end], rest[2+end:]
		} else {
			end := strings.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			arg, rest = rest[:end], rest[end:]
		}
		args = append(args, arg)
		rest = strings.TrimLeft(rest, " \t")
	}
	return key, args, nil
}

// matchHostPatterns reports whether host matches a Host line: some pattern matches it and no
// negated (!) pattern does. Case counts, as in OpenSSH.
func matchHostPatterns(patterns []string, host string) bool {
	matched := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.TrimPrefix(p, "!")
		for _, alt := range strings.Split(p, ",") {
			if ok, _ := path.Match(alt, host); ok {
				if neg {
					return false
				}
				matched = true
			}
		}
	}
	return matched
}

// sshHostOptions are the settings of one host alias from the config files; zero values are
// unset.
type sshHostOptions struct {
	HostName, User string
	Port           int
	IdentityFiles  []string
	// IdentitiesOnly offers only the identity files, not the keys of the agent.
	IdentitiesOnly  bool
	KnownHostsFiles []string
	// ProxyJump is the list of jump hosts ([user@]host[:port], each looked up in the config
	// itself); empty or "none" is a direct connection.
	ProxyJump string
	// ProxyCommand is set when the config names one (which the launcher refuses).
	ProxyCommand string
	// At says where each set value came from, for error messages: keyword to file:line.
	At map[string]string
}

// lookup collects the options of alias. Percent tokens and ~ in HostName, IdentityFile and
// UserKnownHostsFile are expanded once the user and port are known (expand).
func (c *sshConfigFile) lookup(alias string) (sshHostOptions, error) {
	o := sshHostOptions{At: map[string]string{}}
	seen := map[string]bool{}
	for _, b := range c.blocks {
		if b.never || (b.patterns != nil && !matchHostPatterns(b.patterns, alias)) {
			continue
		}
		for _, opt := range b.opts {
			multi := opt.key == "identityfile" || opt.key == "userknownhostsfile"
			if seen[opt.key] && !multi {
				continue
			}
			seen[opt.key] = true
			v := opt.args[0]
			switch opt.key {
			case "hostname":
				o.HostName = v
			case "user":
				o.User = v
			case "port":
				p, err := strconv.Atoi(v)
				if err != nil || p < 1 || p > 65535 {
					return o, fmt.Errorf("ssh config %s: Port %q: want a port in [1, 65535]", opt.at, v)
				}
				o.Port = p
			case "identityfile":
				if !strings.EqualFold(v, "none") {
					o.IdentityFiles = append(o.IdentityFiles, v)
				}
			case "identitiesonly":
				o.IdentitiesOnly = strings.EqualFold(v, "yes")
			case "userknownhostsfile":
				if !strings.EqualFold(v, "none") {
					o.KnownHostsFiles = append(o.KnownHostsFiles, opt.args...)
				}
			case "proxyjump":
				o.ProxyJump = v
			case "proxycommand":
				o.ProxyCommand = strings.Join(opt.args, " ")
			default:
				continue
			}
			if _, ok := o.At[opt.key]; !ok {
				o.At[opt.key] = opt.at
			}
		}
	}
	return o, nil
}

// expandTokens replaces ssh_config's percent tokens: %h the host name, %n the alias as
// given, %p the port, %r the remote user, %u the local user, %d the local home, %% a percent.
// An unknown token is an error naming it.
func expandTokens(s string, tokens map[byte]string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q ends in a lone %%", s)
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := tokens[s[i]]
		if !ok {
			return "", fmt.Errorf("%q: token %%%c is not supported by hetsync", s, s[i])
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// expandHome replaces a leading ~/ with the home directory.
func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, p[1:])
		}
	}
	return p
}
