package main

import (
	"context"

	"k8s.io/client-go/rest"

	"flotilla.dev/flotilla/hub"
	"flotilla.dev/flotilla/hub/controllers/manager"
)

// loops lists what runs inside the hub against its own API.
func loops() []hub.Loop {
	return []hub.Loop{
		{Name: "controller manager", Run: func(ctx context.Context, cfg *rest.Config) error {
			return manager.Run(ctx, cfg, manager.Options{})
		}},
	}
}
