"""What the apps share: API base classes, pagination, parsers, health, metrics, the web server's
protocol, request body limits, the channel layer and the bundled Redis. It imports no app (the
layers contract in pyproject.toml holds it to that); paddleweb/ wires it to them."""
