package trust

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch reloads the keys when the trust directory changes, until ctx ends,
// and calls onChange (which may be nil) with the new KeySetID after each
// reload that changed it; onChange is where a caller re-verifies the
// images it runs. File events are the fast path; the directory is also
// re-read every poll (when > 0), because events are lost when the
// directory itself is created, replaced or is a network mount. Reload
// errors leave the previous keys in force and are passed to onError (may
// be nil).
func (v *Verifier) Watch(ctx context.Context, poll time.Duration, onChange func(keySetID string), onError func(error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	watching := false
	watch := func() {
		if !watching && v.cfg.Dir != "" && w.Add(v.cfg.Dir) == nil {
			watching = true
		}
	}
	watch()
	var tick <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		tick = t.C
	}
	// Editors and Secret updates write in several steps: settle first.
	const settle = 200 * time.Millisecond
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	reload := func() {
		changed, err := v.Reload()
		if err != nil {
			if onError != nil {
				onError(err)
			}
			return
		}
		if changed && onChange != nil {
			onChange(v.KeySetID())
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 && ev.Name == v.cfg.Dir {
				watching = false
			}
			debounce.Reset(settle)
		case err, ok := <-w.Errors:
			if ok && onError != nil {
				onError(err)
			}
		case <-debounce.C:
			reload()
		case <-tick:
			watch()
			reload()
		}
	}
}
