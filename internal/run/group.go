package run

import (
	"context"
	"fmt"
	"sync"
)

// Loop is one named long-running part of a Group; Run works until its ctx
// ends.
type Loop struct {
	Name string
	Run  func(ctx context.Context) error
}

// Group runs loops together until ctx ends or one of them fails.
//
// A loop that returns an error while the group runs stops the group: the
// other loops' ctx is cancelled, and Run returns that error named by its
// loop ("name: err", wrapped with %w). Only the first error counts: an
// error returned once the group is cancelled (by that first error, or
// because ctx ended) is the consequence of the cancel and is dropped, so
// a group whose ctx ends returns nil. A loop that returns nil is done and
// the others go on. Run returns once every loop has returned.
type Group struct {
	Loops []Loop
	// OnError, when set, is called with the first error (named) as soon
	// as it happens, before the other loops are told to stop.
	OnError func(err error)
}

// Run runs the loops; see Group.
func (g Group) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, l := range g.Loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := l.Run(ctx)
			if err == nil || ctx.Err() != nil {
				return
			}
			once.Do(func() {
				first = fmt.Errorf("%s: %w", l.Name, err)
				if g.OnError != nil {
					g.OnError(first)
				}
				cancel()
			})
		}()
	}
	wg.Wait()
	return first
}
