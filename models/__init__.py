"""Released model artifacts (packaged into the wheel as `winnow.models`)."""
