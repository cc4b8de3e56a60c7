"""HTTP routes; thin: validate, call a service, shape the response."""
