"""The bridge names that code written for Gaudi by others uses, as data (docs in
consumer_surface/README.md): ``python -m consumer_surface extract`` reads the pinned
releases, ``python -m consumer_surface report`` says which names the emulator provides."""
