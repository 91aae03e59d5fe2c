"""The HTTP front: health, readiness, Prometheus metrics, messages in the message-state
transports and the admin JSON API, over the same services as the other fronts
(``docs/http.md``)."""
