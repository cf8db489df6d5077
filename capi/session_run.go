package main

/*
#include <stdint.h>
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hetsync/hetsync"
	"github.com/hetsync/hetsync/collective"
	"github.com/hetsync/hetsync/launcher"
	"github.com/hetsync/hetsync/trainer"
)

// sessionRecord is what a session's config.json records: the configuration at the top level,
// as `hetsync train` records it (so `hetsync report` reads the strategy, the ranks and the
// heterogeneity the same way), the job it ran in, and the program that drove it.
type sessionRecord struct {
	trainer.Config
	TrainSize int    `json:"train_size,omitempty"`
	Ranks     int    `json:"ranks"`
	Transport string `json:"transport"`
	DataPath  string `json:"data_path,omitempty"`
	Security  string `json:"security,omitempty"`
	Sched     string `json:"sched,omitempty"`
	// Program is the command line of rank 0's process: the interpreter, the program and its
	// arguments (the process's argv, which the Go runtime of the shared library reads).
	Program []string `json:"program"`
	// Settings are the session's settings as the program passed them ("lr=0.05"), beside
	// the configuration they became.
	Settings []string `json:"settings"`
	Started  string   `json:"started"`
}

// takeOut removes the session's "out" setting (the run directory, `hetsync train --out`) from
// pairs and returns it; without one, the run directory is the launcher's (`hetsync launch
// --out`, HETSYNC_RUN_DIR), or none.
func takeOut(pairs [][2]string) (string, [][2]string) {
	out, given := "", false
	kept := pairs[:0]
	for _, kv := range pairs {
		if strings.TrimLeft(kv[0], "-") == "out" {
			out, given = kv[1], true
			continue
		}
		kept = append(kept, kv)
	}
	if !given {
		out = os.Getenv(launcher.EnvRunDir)
	}
	return out, kept
}

// newSession starts the session of hs_session_new on c: a trainer.RunSession writing the run
// directory out (none when empty) with the session's record.
func newSession(c *hetsync.Comm, cfg trainer.Config, params, grads []float32, opts trainer.TrainOptions, out string, pairs [][2]string) (*trainer.RunSession, error) {
	s := c.Settings()
	rec := sessionRecord{Config: cfg, TrainSize: opts.TrainSize, Ranks: c.Size(), Transport: s.Transport, Sched: s.Sched,
		Program: os.Args, Started: time.Now().UTC().Format(time.RFC3339)}
	if s.Transport == "p2p" {
		rec.DataPath, rec.Security = s.DataPath, s.Security
	}
	for _, kv := range pairs {
		rec.Settings = append(rec.Settings, kv[0]+"="+kv[1])
	}
	if networkStragglers(cfg.Stragglers, c.Size()) {
		// Network-mode stragglers delay a rank's messages under the rounds' communicator,
		// which the job's (over the bare endpoint) would bypass, and which auto would not send
		// on a one-host job (it reduces in shared memory). So the rounds run over a named
		// algorithm's communicator that the trainer builds over the decorated endpoint, on
		// every rank, so that all of them run the rounds' collectives in step.
		if cfg.Collective == collective.DefaultAlgorithm {
			return nil, fmt.Errorf("hetsync hs_session_new: rank %d: stragglers (network mode) delay the messages of the rounds' collective, "+
				"which %s may reduce in shared memory instead: name one (collective=\"ring\")", c.Rank(), cfg.Collective)
		}
		opts.Comm = nil
	}
	// As hetsync train's ranks: the rounds' communicator, when the trainer builds one, plans
	// from the job's links and reports as the job's does, and the job's timeline (--timeline)
	// gets a span per round.
	opts.Links, opts.Watch = c.Links(), c.Watch()
	opts.Out, opts.Record, opts.DataPath = out, rec, s.Transport
	if s.DataPath != "" {
		opts.DataPath += " data-path=" + s.DataPath
	}
	return trainer.NewRunSession(ctx(), c.Endpoint(), cfg, params, grads, opts)
}

//export hs_session_eval
func hs_session_eval(id C.int64_t, accuracy, loss C.double) *C.char {
	s, err := sessionOf(id, "hs_session_eval")
	if err != nil {
		return cerr(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return cerr(s.s.Eval(float64(accuracy), float64(loss)))
}

// networkStragglers says whether stragglers delay the messages of any of the job's ranks
// (Windows' test, over the ranks the configuration names rather than every rank of the job).
func networkStragglers(s trainer.StragglerConfig, size int) bool {
	return s.Mode != "compute" && s.Enabled() && slices.ContainsFunc(s.Ranks, func(r int) bool { return r >= 0 && r < size })
}
