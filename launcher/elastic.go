package launcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Reachable logs in to every remote host over SSH, in parallel, and returns the hosts that
// answered (this machine always does) and a *HostError for each one that did not. A job that
// may shrink (--min-np) places its ranks on the hosts Reachable returns.
func Reachable(ctx context.Context, cfg SSHConfig, hosts []Host) (up []Host, down []error, err error) {
	place := make([]Slot, len(hosts))
	for i := range hosts {
		place[i] = Slot{Host: i, LocalSize: 1}
	}
	s, err := NewSSHSpawner(cfg, hosts, place)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		if h.Local() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.client(ctx, i)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	for i, h := range hosts {
		if errs[i] == nil {
			up = append(up, h)
			continue
		}
		var he *HostError
		if !errors.As(errs[i], &he) {
			errs[i] = &HostError{Host: h.String(), Err: errs[i]}
		}
		down = append(down, errs[i])
	}
	return up, down, nil
}

// ElasticNP is the number of ranks a job of np ranks (0: every slot) gets on the hosts up,
// given that it may shrink to minNP ranks (torchrun's --nnodes MIN:MAX): np when the hosts'
// slots hold it (or oversubscribe allows it), else every slot, provided that is at least
// minNP. down are the hosts that were dropped, named in the error.
func ElasticNP(up []Host, np, minNP int, oversubscribe bool, down []error) (int, error) {
	slots := 0
	for _, h := range up {
		slots += h.Slots
	}
	n := np
	if n == 0 || (n > slots && !oversubscribe) {
		n = slots
	}
	if len(up) == 0 || n < minNP {
		why := ""
		if len(down) > 0 {
			msgs := make([]string, len(down))
			for i, e := range down {
				msgs[i] = e.Error()
			}
			why = " (dropped: " + strings.Join(msgs, "; ") + ")"
		}
		return 0, fmt.Errorf("--min-np %d: the reachable hosts hold only %d rank(s)%s", minNP, n, why)
	}
	return n, nil
}
