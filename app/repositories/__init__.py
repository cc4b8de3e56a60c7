"""All SQL lives here. Every statement that reads user data filters by user_id."""
