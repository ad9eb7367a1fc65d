"""Test and demo support, apart from product code: a scripted stand-in for Claude that sits
behind the real anthropic SDK (``scripted_model``). Nothing here is imported by the core."""
