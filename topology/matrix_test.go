package topology

import "testing"

func TestUniformRoundTrip(t *testing.T) {
	m := Uniform(5, 30e-6, 1/1.25e9)
	m.Host = []int{0, 0, 1, 1, 2}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hosts() != 3 || len(got.RanksOf()[1]) != 2 || got.Links[4][0] != m.Links[4][0] {
		t.Fatalf("round trip lost data: %+v", got)
	}
}

func TestValidateRejects(t *testing.T) {
	bad := Uniform(3, 1e-6, 1e-9)
	bad.Host = []int{0, 2, 2} // host 1 unused
	if err := bad.Validate(); err == nil {
		t.Fatal("sparse host indices accepted")
	}
	neg := Uniform(2, 1e-6, 1e-9)
	neg.Links[0][1].Beta = -1
	if err := neg.Validate(); err == nil {
		t.Fatal("negative beta accepted")
	}
}
