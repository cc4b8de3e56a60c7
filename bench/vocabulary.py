"""Real vocabulary for generated memories: people, places, food, tools, activities, dates."""

from __future__ import annotations

# fmt: off
PEOPLE = (
    "Maria", "James", "Aisha", "Tomas", "Priya", "Liam", "Sofia", "Kenji", "Amara", "Lucas",
    "Elena", "Mateo", "Yuki", "Noah", "Fatima", "Oliver", "Ingrid", "Diego", "Mei", "Samuel",
    "Chloe", "Arjun", "Nadia", "Felix", "Hannah", "Omar", "Isabel", "Viktor", "Grace", "Rafael",
    "Leila", "Henrik", "Zara", "Daniel", "Anya", "Marco", "Esther", "Kwame", "Julia", "Tariq",
    "Clara", "Ravi", "Sienna", "Pablo", "Freya", "Hugo", "Nina", "Emeka", "Lucia", "Jonas", "Ruth",
    "Andre", "Keiko", "Patrick", "Leona", "Sergei", "Alma", "Caleb", "Dalia", "Ethan", "Mila",
    "Bruno", "Tessa", "Idris", "Carmen", "Aaron", "Helga", "Jamal", "Rosa", "Malik", "Vera", "Theo",
    "Lena", "Kofi", "Beatriz", "Adam", "Signe", "Hassan", "Olga", "Simon",
)
RELATIONS = (
    "sister", "brother", "mother", "father", "cousin", "daughter", "son", "aunt", "uncle",
    "best friend", "neighbour", "colleague", "manager", "partner", "grandmother", "roommate",
)
CITIES = (
    "Lisbon", "Berlin", "Tokyo", "Nairobi", "Toronto", "Buenos Aires", "Seoul", "Oslo", "Mumbai",
    "Melbourne", "Chicago", "Madrid", "Istanbul", "Cape Town", "Vancouver", "Copenhagen",
    "Mexico City", "Edinburgh", "Kyoto", "Lagos", "Prague", "Vienna", "Dublin", "Singapore",
    "Austin", "Montreal", "Helsinki", "Rome", "Amsterdam", "Bogota", "Hanoi", "Marrakesh",
    "Seattle", "Porto", "Zurich", "Athens", "Lima", "Budapest", "Denver", "Stockholm",
)
JOBS = (
    "nurse", "software engineer", "teacher", "architect", "pharmacist", "chef", "accountant",
    "physiotherapist", "journalist", "electrician", "data analyst", "lawyer", "dentist",
    "graphic designer", "pilot", "veterinarian", "carpenter", "biologist", "translator",
    "firefighter", "product manager", "librarian", "mechanic", "midwife", "photographer",
)
FOODS = (
    "ramen", "sushi", "lentil soup", "pad thai", "margherita pizza", "falafel", "paella",
    "butter chicken", "tacos al pastor", "mushroom risotto", "pho", "shakshuka", "pierogi",
    "bibimbap", "moussaka", "ceviche", "jollof rice", "dumplings", "lasagna", "green curry",
    "avocado toast", "oatmeal with berries", "grilled salmon", "chickpea salad", "croissants",
    "dark chocolate", "blue cheese", "spicy food", "mashed potatoes", "fried plantains",
)
DRINKS = (
    "black coffee", "green tea", "oat milk latte", "espresso", "chai", "sparkling water",
    "orange juice", "matcha", "hot chocolate", "cold brew", "rooibos tea", "kombucha",
)
ADDITIONS = ("oat milk", "honey", "no sugar", "a slice of lemon", "cinnamon", "almond milk", "ice")
MEALS = ("breakfast", "lunch", "dinner", "team lunches", "weekend brunch", "late-night snacks")
ALLERGENS = ("peanuts", "shellfish", "gluten", "lactose", "penicillin", "cats", "pollen", "eggs")
PETS = ("dog", "cat", "parrot", "rabbit", "tortoise", "hamster", "golden retriever", "beagle")
PET_NAMES = (
    "Biscuit", "Luna", "Pepper", "Milo", "Olive", "Simba", "Mochi", "Ziggy", "Nala", "Toffee",
    "Rocket", "Clementine", "Basil", "Pixel", "Juniper", "Waffles",
)
SKILLS = (
    "Spanish", "Japanese", "the piano", "pottery", "rock climbing", "salsa dancing", "Python",
    "watercolour painting", "sourdough baking", "chess", "woodworking", "photography", "the guitar",
    "Italian", "scuba diving", "knitting", "sign language", "calligraphy",
)
PLACES = (
    "the community centre", "an evening class", "the university", "a local studio", "YouTube",
    "a weekend workshop", "the public library", "an online course", "the gym downtown",
)
TOOLS = (
    "Notion", "Obsidian", "Google Docs", "Confluence", "Trello", "Jira", "Slack", "Excel", "Figma",
    "Linear", "Asana", "Markdown files", "a paper notebook", "Microsoft Teams",
)
TECH = (
    "PostgreSQL", "MongoDB", "Redis", "Kafka", "Kubernetes", "Terraform", "React", "Vue", "FastAPI",
    "Django", "Go", "Rust", "TypeScript", "GraphQL", "gRPC", "Snowflake", "BigQuery", "AWS Lambda",
    "Cloud Run", "SQLite", "Elasticsearch", "RabbitMQ", "Svelte", "Flutter",
)
PROJECTS = (
    "inventory", "billing", "onboarding", "mobile app", "analytics dashboard", "search",
    "customer portal", "payroll", "recommendation engine", "data warehouse", "chatbot",
    "website redesign", "warehouse robotics", "loyalty programme", "fraud detection",
)
ACTIVITIES = (
    "hiking", "cycling", "yoga", "swimming", "board games", "running", "gardening", "reading",
    "cooking Thai food", "playing tennis", "birdwatching", "jazz concerts", "climbing",
    "baking bread", "watching football", "playing the cello", "volunteering at the shelter",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
YEARS = tuple(str(y) for y in range(2015, 2027))
TIMES = ("9:00", "9:30", "10:00", "11:15", "13:00", "14:30", "15:45", "16:00", "17:30", "18:00")
EVENTS = (
    "wedding", "birthday party", "quarterly review", "product launch", "conference",
    "family reunion", "housewarming", "graduation", "team offsite", "charity run", "book club",
    "dentist appointment", "job interview", "parent-teacher meeting",
)
LANDMARKS = (
    "the old harbour", "the central station", "the cathedral", "the botanical garden",
    "the science museum", "the river market", "the university campus", "the city park",
)
BOOKS = (
    "Sapiens", "The Overstory", "Atomic Habits", "Project Hail Mary", "Educated", "Dune",
    "The Pragmatic Programmer", "Thinking, Fast and Slow", "Circe", "The Midnight Library",
    "Designing Data-Intensive Applications", "Braiding Sweetgrass", "Klara and the Sun",
)
ITEMS = (
    "the dry cleaning", "a birthday cake", "the repaired laptop", "printer ink",
    "new running shoes", "the prescription", "concert tickets", "a spare house key",
    "the passport photos", "gift wrap", "the bike from the repair shop",
    "groceries for the weekend",
)
STORES = ("pharmacy", "hardware store", "bakery", "post office", "farmers market", "bookshop")
VENDORS = (
    "Acme Supplies", "Northwind", "BlueRiver Logistics", "Globex", "Initech", "Umbrella Foods",
)
PRODUCTS = (
    "office chairs", "laptops", "coffee beans", "packaging", "cloud hosting", "printer paper",
)
AIRPORTS = (
    "terminal 1", "terminal 2", "the international terminal", "gate 14", "the north terminal",
)
RESTAURANT_KINDS = ("Italian", "Mexican", "Indian", "Japanese", "Ethiopian", "Lebanese", "Korean")
LANGUAGES = ("Python", "TypeScript", "Go", "Rust", "Java", "Kotlin", "plain English pseudocode")
# fmt: on
