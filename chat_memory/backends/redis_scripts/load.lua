return window()
