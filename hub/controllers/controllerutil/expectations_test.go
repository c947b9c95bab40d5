package controllerutil

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestExpectationsCountCreationsAndDeletions(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := NewExpectations(clk)
	if !e.Satisfied("ns/rs") {
		t.Fatal("nothing expected, yet not satisfied")
	}
	e.Expect("ns/rs", 2, []string{"ns/a", "ns/b"})
	if add, del := e.Pending("ns/rs"); add != 2 || del != 2 {
		t.Fatalf("Pending = %d, %d; want 2, 2", add, del)
	}
	e.CreationObserved("ns/rs")
	e.CreationObserved("ns/rs")
	e.CreationObserved("ns/rs") // one more than expected: must not go below zero
	e.DeletionObserved("ns/rs", "ns/a")
	e.DeletionObserved("ns/rs", "ns/a") // seen twice (deletionTimestamp, then removal)
	if e.Satisfied("ns/rs") {
		t.Fatal("satisfied while the deletion of ns/b is still expected")
	}
	if add, del := e.Pending("ns/rs"); add != 0 || del != 1 {
		t.Fatalf("Pending = %d, %d; want 0, 1", add, del)
	}
	e.DeletionObserved("ns/rs", "ns/b")
	if !e.Satisfied("ns/rs") {
		t.Fatal("not satisfied after everything expected was observed")
	}
	if e.Expect("ns/rs", 1, nil); e.Satisfied("ns/rs") {
		t.Fatal("a new expectation did not replace the fulfilled one")
	}
	if e.Satisfied("other") != true {
		t.Fatal("another key is held back by ns/rs's expectation")
	}
	e.Delete("ns/rs")
	if add, del := e.Pending("ns/rs"); add != 0 || del != 0 || !e.Satisfied("ns/rs") {
		t.Fatalf("after Delete: pending %d, %d, satisfied %v; want nothing", add, del, e.Satisfied("ns/rs"))
	}
}

func TestExpectationsExpireAfterTimeout(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	e := NewExpectations(clk)
	e.ExpectCreations("ns/rs", 3)
	clk.SetTime(clk.Now().Add(ExpectationsTimeout))
	if e.Satisfied("ns/rs") {
		t.Fatal("satisfied at exactly the timeout, want only after it")
	}
	clk.SetTime(clk.Now().Add(time.Second))
	if !e.Satisfied("ns/rs") {
		t.Fatal("an expectation older than the timeout still holds the controller back")
	}
}
