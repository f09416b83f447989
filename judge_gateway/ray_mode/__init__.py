"""Ray Serve mode (`judge-gateway serve --ray`): needs the `ray` extra (scripts/setup_ray.sh)."""
