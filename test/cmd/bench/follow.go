package main

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// lister is the List and Watch of one resource, as a follower needs them: list returns the
// items with the list's resource version.
type lister struct {
	list  func(ctx context.Context, opts metav1.ListOptions) (items []any, rv string, err error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// follow lists and watches a resource until ctx ends, handing every object it sees (not
// deletions) to observe with the time it saw it, and calls established once the first watch
// is open. The watch is drained at once (a watcher that falls behind is closed by the
// apiserver), and a closed watch is resumed from the last resource version seen, or from a
// fresh list when that is too old.
func follow(ctx context.Context, l lister, observe func(obj any, now time.Time), established func()) error {
	rv := ""
	for {
		if rv == "" {
			items, listRV, err := l.list(ctx, metav1.ListOptions{})
			if err != nil {
				return ignoreCanceled(ctx, err)
			}
			now := time.Now()
			for _, it := range items {
				observe(it, now)
			}
			rv = listRV
		}
		w, err := l.watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			return ignoreCanceled(ctx, err)
		}
		established()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = "" // expired: list again
				break
			}
			obj, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type != watch.Deleted && ev.Type != watch.Bookmark {
				observe(ev.Object, time.Now())
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return nil
		}
	}
}

func ignoreCanceled(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// pointers turns a list's items into what follow hands on: a pointer to each.
func pointers[T any](items []T) []any {
	out := make([]any, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
