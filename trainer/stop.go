package trainer

import (
	"fmt"
	"strconv"
	"time"
)

// Stopping is decided by rank 0 alone and agreed by all ranks in band, so that no rank leaves
// while the others enter a collective:
//
//   - Rank 0 evaluates StopRule.Decide before every round, from the global progress it knows
//     (rounds, samples trained by all ranks, elapsed time, the best test accuracy its
//     evaluator has reported) with the coming round counted in, and passes the vote to
//     Strategy.Round: the round that reaches --max-rounds or --epochs is the last one.
//   - Synchronous strategies carry the vote in the round's own collective (ssgd appends one
//     element to the allreduced gradient); every rank reads the same reduced value, so all
//     ranks finish the same round and stop together.
//   - Asynchronous strategies send the vote with rank 0's push; the parameter server sets a
//     sticky stop flag that every later reply carries, so each worker stops after its next
//     request. Then every rank closes the service, which waits until all workers are done.
//   - local sends the vote to every rank on the control channel; a watcher goroutine on each
//     rank turns it into a flag the rank checks between rounds.
//
// The other ranks still apply their own time, epoch and round bounds only through rank 0's
// vote: their local view of progress could differ and split the job.

// StopRule holds the stop conditions. A zero field disables its condition.
type StopRule struct {
	TargetAcc float64
	Epochs    float64
	MaxTime   time.Duration
	MaxRounds int
	// TrainSize is the number of training samples of the whole job (all shards): an epoch
	// is TrainSize samples trained by all ranks together.
	TrainSize int
}

// Progress is what rank 0 knows about the job between rounds.
type Progress struct {
	Rounds        int           // rounds completed (for asynchronous strategies: global updates / ranks)
	GlobalSamples int64         // samples trained by all ranks together
	Elapsed       time.Duration // since training started
	BestAcc       float64       // best evaluated test accuracy so far; negative when none yet
	BestRound     int           // the round (0-based, this rank's) whose snapshot scored BestAcc
}

// Epochs is the number of passes over the training set that GlobalSamples amounts to.
func (s StopRule) EpochsDone(p Progress) float64 {
	if s.TrainSize <= 0 {
		return 0
	}
	return float64(p.GlobalSamples) / float64(s.TrainSize)
}

// Decide says whether training stops now, and why.
func (s StopRule) Decide(p Progress) (bool, string) {
	switch {
	case s.ReachedTarget(p):
		// Both numbers as they are, unrounded: a rounded target or accuracy could read as a
		// stop below the target.
		return true, fmt.Sprintf("reached target accuracy %s: the snapshot after round %d scored %s",
			strconv.FormatFloat(s.TargetAcc, 'g', -1, 64), p.BestRound+1, strconv.FormatFloat(p.BestAcc, 'g', -1, 64))
	case s.MaxRounds > 0 && p.Rounds >= s.MaxRounds:
		return true, fmt.Sprintf("reached the limit of %d rounds", s.MaxRounds)
	case s.Epochs > 0 && s.EpochsDone(p) >= s.Epochs:
		return true, fmt.Sprintf("trained %g epochs", s.Epochs)
	case s.MaxTime > 0 && p.Elapsed >= s.MaxTime:
		return true, fmt.Sprintf("reached the time limit of %v", s.MaxTime)
	}
	return false, ""
}

// ReachedTarget says whether an evaluated snapshot reached TargetAcc. The stop it decides is
// taken a round or more after that snapshot (the vote rides on the next round, and the
// snapshot was evaluated while the job trained on), so the final model's accuracy may differ:
// Run says so in the stop reason when it is below the target.
func (s StopRule) ReachedTarget(p Progress) bool {
	return s.TargetAcc > 0 && p.BestAcc >= s.TargetAcc
}

// Fraction is how far the run is toward its nearest stop condition, in [0, 1] (for the
// progress bar).
func (s StopRule) Fraction(p Progress) float64 {
	f := 0.0
	if s.TargetAcc > 0 && p.BestAcc > 0 {
		f = max(f, p.BestAcc/s.TargetAcc)
	}
	if s.MaxRounds > 0 {
		f = max(f, float64(p.Rounds)/float64(s.MaxRounds))
	}
	if s.Epochs > 0 {
		f = max(f, s.EpochsDone(p)/s.Epochs)
	}
	if s.MaxTime > 0 {
		f = max(f, float64(p.Elapsed)/float64(s.MaxTime))
	}
	return min(f, 1)
}
