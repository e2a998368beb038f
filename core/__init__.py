"""What the apps share: API base classes, pagination, parsers, health, metrics, the web server's
protocol, request body limits and ASGI headers, the channel layer, the bundled Redis, and the events
one app publishes for the others (events.py). It imports no app (the layers contract in
pyproject.toml holds it to that); paddleweb/ wires it to them."""
