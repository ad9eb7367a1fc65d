"""What the tests share: helpers, validators of provider requests, worker processes, scripted agents."""
