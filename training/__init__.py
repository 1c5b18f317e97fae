"""Training package of streampunct: data, models, losses, methods, trainer (needs the [train] extra)."""
