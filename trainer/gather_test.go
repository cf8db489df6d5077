package trainer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetsync/hetsync/collective/kv"
	"github.com/hetsync/hetsync/metrics"
	"github.com/hetsync/hetsync/service"
	"github.com/hetsync/hetsync/topology"
	"github.com/hetsync/hetsync/transport"
)

// TestGatherRecords sends enough records to need several chunks and checks rank 0 gets
// every record of every rank, extras included.
func TestGatherRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const size = 3
	counts := []int{2, 0, 12000} // rank 2's lines exceed one chunk
	eps := transport.NewMemJob(size)
	var got []metrics.RoundRecord
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			recs := make([]metrics.RoundRecord, counts[r])
			for i := range recs {
				recs[i] = metrics.RoundRecord{Rank: r, Round: i, TimeS: float64(i) / 10, Samples: 64, Loss: 0.5,
					Extra: []metrics.Field{{Key: "staleness", Value: float64(i % 5)}}}
			}
			all, err := GatherRecords(ctx, ep, recs)
			errs[r] = err
			if r == 0 {
				got = all
			} else if all != nil {
				t.Errorf("rank %d got records back", r)
			}
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if len(got) != 12002 {
		t.Fatalf("rank 0 holds %d records, want 12002", len(got))
	}
	last := got[len(got)-1]
	if last.Rank != 2 || last.Round != 11999 || len(last.Extra) != 1 || last.Extra[0].Value != 4 {
		t.Fatalf("last record %+v", last)
	}
}

// TestControlStepsNamed checks that two ranks at different steps of the job control (rank 0
// sends its stop vote where rank 1 waits for a checkpoint decision) get an error naming the
// service and both steps, not a header dump.
func TestControlStepsNamed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps := transport.NewMemJob(2)
	if err := controlSend(ctx, eps[0], 1, ctrlStop, []byte{1}); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	_, err := controlRecv(ctx, eps[1], 0, ctrlCkptDue, b[:])
	for _, want := range []string{"job-control", "rank 1", "rank 0", "checkpoint-due", "got stop"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to name %q", err, want)
		}
	}
}

// TestServiceChannelsDistinct checks that the services of a training job and the link
// measurement have channels of their own: the layer derives a channel from a name, and two
// names on one channel would turn every message between them into an error.
func TestServiceChannelsDistinct(t *testing.T) {
	seen := map[transport.Channel]string{}
	for _, name := range []string{kv.DefaultName, esyncServiceName, controlServiceName, topology.MeasureName} {
		ch := service.ChannelOf(name)
		if other, ok := seen[ch]; ok {
			t.Fatalf("%q and %q share channel %d", other, name, ch)
		}
		seen[ch] = name
	}
}

func TestWriteRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	all := []metrics.RoundRecord{
		{Rank: 1, Round: 0, TimeS: 1, Samples: 64, ComputeS: 0.5},
		{Rank: 0, Round: 0, TimeS: 1, Samples: 64, ComputeS: 0.8, HasAccuracy: true, Accuracy: 0.72},
		{Rank: 0, Round: 1, TimeS: 2, Samples: 64, ComputeS: 0.8},
		{Rank: 1, Round: 1, TimeS: 2, Samples: 64, ComputeS: 0.5},
	}
	evals := []EvalResult{
		{GlobalRound: 1, SnapshotTime: 2 * time.Second, Acc: 0.81, Loss: 0.5},
		{GlobalRound: 0, SnapshotTime: time.Second, Acc: 0.72, Loss: 0.9},
	}
	cfg := validConfig()
	sum, err := WriteRun(dir, cfg, all, evals, Ran{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ranks != 2 || sum.Samples != 256 || sum.FinalAccuracy != 0.81 || sum.TimeToAccuracy["0.80"] != 2 || sum.TimeToAccuracy["0.70"] != 1 {
		t.Fatalf("summary %+v", sum)
	}
	if _, ok := sum.TimeToAccuracy["0.85"]; ok {
		t.Fatal("0.85 reported as reached")
	}
	_, rounds, ev, err := metrics.LoadRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 4 || rounds[0].Rank != 0 || rounds[1].Round != 1 || rounds[2].Rank != 1 {
		t.Fatalf("metrics.jsonl not ordered by rank then round: %+v", rounds)
	}
	if len(ev) != 2 || ev[0].TimeS != 1 {
		t.Fatalf("eval.jsonl not in time order: %+v", ev)
	}
	b, err := os.ReadFile(filepath.Join(dir, metrics.SummaryFile))
	if err != nil || !json.Valid(b) {
		t.Fatalf("summary.json: %v", err)
	}
	if _, err := WriteRun(dir, cfg, all, evals, Ran{}); err == nil {
		t.Fatal("WriteRun overwrote an existing run")
	}
}
