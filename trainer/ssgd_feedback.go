package trainer

import "fmt"

// ssgdFeedback is ssgd with compressed rounds (Config.Compress): each rank's error feedback
// holds what its encoding lost of its own gradients, different on every rank, so its
// checkpoint is per rank (PerRankCheckpointer), each part ssgd's state followed by that rank's
// residual, and a resumed run sends what the uninterrupted one would have. Everything else is
// ssgd's.
type ssgdFeedback struct{ *ssgd }

// compressesRounds reports whether cfg sends its rounds encoded, with error feedback; a
// Compress that does not parse is Start's error (newRoundReducer), not the factory's.
func compressesRounds(cfg *Config) bool {
	_, encodes, err := roundCompression(cfg)
	return err == nil && encodes
}

// PerRankCheckpoint: the ranks differ in their error feedback's residual.
func (s *ssgdFeedback) PerRankCheckpoint() {}

// Resizable: each rank's residual is its own, so a job resumes on the ranks that saved it.
func (s *ssgdFeedback) Resizable() bool { return false }

// CheckpointState is ssgd's state and this rank's residual.
func (s *ssgdFeedback) CheckpointState(w *Worker) ([]byte, error) {
	b, err := s.ssgd.CheckpointState(w)
	if err != nil {
		return nil, err
	}
	return s.reduce.appendState(b), nil
}

// RestoreState loads CheckpointState's bytes after Start.
func (s *ssgdFeedback) RestoreState(w *Worker, state []byte, from *CheckpointHeader) error {
	if len(state) < ssgdStateLen {
		return fmt.Errorf("ssgd state of %d bytes, want at least %d", len(state), ssgdStateLen)
	}
	if err := s.ssgd.RestoreState(w, state[:ssgdStateLen], from); err != nil {
		return err
	}
	if err := s.reduce.restoreState(state[ssgdStateLen:]); err != nil {
		return fmt.Errorf("ssgd: rank %d: %w", w.Rank, err)
	}
	return nil
}
