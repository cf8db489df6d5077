package trainer

import (
	"context"
	"testing"
	"time"

	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/transport"
)

// onHosts stands for the p2p endpoint's proof of which ranks share a host: rank r is on host
// r/2, so a 4-rank job has ranks 0,1 on one host and 2,3 on another.
type onHosts struct{ transport.Endpoint }

func (e onHosts) Unwrap() transport.Endpoint { return e.Endpoint }
func (e onHosts) SameHost() []bool {
	row := make([]bool, e.Size())
	for q := range row {
		row[q] = q/2 == e.Rank()/2
	}
	return row
}

// TestTrainCountsLinkBytes trains 4 ranks on 2 hosts with SSGD over a ring allreduce (the
// communicator's sends) and with ASGD over the parameter server (the services' sends through
// the worker's endpoint). Every round's bytes by class of link sum to the bytes_sent the
// transport counted, so everything the rank sent was classed once (the classes of a known
// pattern are TestLinkBytesRingTwoHosts's), and both classes carry traffic.
func TestTrainCountsLinkBytes(t *testing.T) {
	const p, rounds = 4, 6
	train := newSynthSet(400, 1)
	for _, strategy := range []string{"ssgd", "asgd"} {
		t.Run(strategy, func(t *testing.T) {
			cfg := Config{Strategy: strategy, Batch: 8, LR: 0.01, MaxRounds: rounds, Seed: 5}
			if strategy == "ssgd" {
				cfg.Collective = "ring"
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			recs := make([][]metrics.RoundRecord, p)
			eps := transport.NewMemJob(p)
			for r := range eps {
				eps[r] = onHosts{eps[r]}
			}
			runRanks(t, eps, cancel, func(r int, ep transport.Endpoint) error {
				m, err := NewBatchModel(newSynthModel(cfg.Seed), &synthBatches{set: train.shard(r, p), batch: cfg.Batch})
				if err != nil {
					return err
				}
				res, err := Train(ctx, ep, cfg, m, TrainOptions{TrainSize: len(train.y)})
				if err == nil {
					recs[r] = res.Records
				}
				return err
			})
			var sum [p]metrics.LinkBytes
			for r, rs := range recs {
				for _, rec := range rs {
					if rec.Sent.Total() != rec.BytesSent {
						t.Errorf("rank %d round %d: %+v by class of link, %d bytes in all: the transport counted bytes_sent %d",
							r, rec.Round, rec.Sent, rec.Sent.Total(), rec.BytesSent)
					}
					sum[r] = sum[r].Add(rec.Sent)
				}
				if sum[r].Groups != 0 {
					t.Errorf("rank %d: %d bytes between groups in a job without a link matrix", r, sum[r].Groups)
				}
			}
			var all metrics.LinkBytes
			for _, s := range sum {
				all = all.Add(s)
			}
			if all.Host == 0 || all.Hosts == 0 {
				t.Errorf("the job sent %+v: its ranks talk within and across both hosts", all)
			}
		})
	}
}
